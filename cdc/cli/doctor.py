"""``cdc doctor FILE``: a preflight of everything a pipeline needs, one line per check.

The runner is source-neutral. Each plugin contributes its own checks through an optional
``doctor(config, pipeline_name) -> list[Check]`` on its plugin class (the source's and every
sink's, found through :mod:`cdc.contracts.plugins` as ``cdc verify`` finds ``read_rows``); the log's
checks live with the log. A plugin without ``doctor`` is reported as not checked, which is not
a failure.

A check is ``ok`` (nothing to do), a *warning* (works, but deserves a look: still ok), or
failed, with ``fix``: the exact statement, setting or command that repairs it. The command exits
0 when no check failed, 1 otherwise (2 for a file that does not validate, as elsewhere).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from cdc.config.pipeline import EmbeddedLogConfig, Pipeline
from cdc.contracts import plugins
from cdc.support.redact import redact


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of one preflight check.

    Attributes:
        name: what was checked, e.g. ``wal_level`` or ``table public.items: primary key``.
        ok: nothing stops the pipeline here.
        detail: what was found (never a secret).
        fix: for a failed check (or a warning), the exact statement or setting that repairs it.
        warning: ok, but worth a look (unbounded WAL retention, a slot in use...).
        scope: ``source``, ``log`` or ``sink <name>``; set by the runner.
    """

    name: str
    ok: bool
    detail: str
    fix: str | None = None
    warning: bool = False
    scope: str = ""

    @property
    def level(self) -> str:
        """``ok``, ``warn`` or ``fail``."""
        if not self.ok:
            return "fail"
        return "warn" if self.warning else "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "name": self.name,
            "ok": self.ok,
            "level": self.level,
            "detail": self.detail,
            "fix": self.fix,
        }


def passed(name: str, detail: str) -> Check:
    """An ok check."""
    return Check(name, True, detail)


def warned(name: str, detail: str, fix: str | None = None) -> Check:
    """An ok check that deserves a look."""
    return Check(name, True, detail, fix, warning=True)


def failed(name: str, detail: str, fix: str) -> Check:
    """A failed check and its fix."""
    return Check(name, False, detail, fix)


def run_checks(pipeline: Pipeline) -> list[Check]:
    """Every check of ``pipeline``: the source's, the log's, then each sink's, in file order."""
    checks = _plugin_checks(plugins.SOURCE_GROUP, pipeline.source, pipeline.name, "source")
    checks += _scoped("log", _log_checks(pipeline))
    for sink in pipeline.sinks:
        checks += _plugin_checks(plugins.SINK_GROUP, sink, pipeline.name, f"sink {sink.name}")
    return checks


def _plugin_checks(group: str, config: Any, pipeline_name: str, scope: str) -> list[Check]:
    doctor = getattr(plugins.load(group, config.type), "doctor", None)
    if doctor is None:
        return _scoped(scope, [passed("checks", f"type {config.type!r} has no preflight checks")])
    return _scoped(scope, _guarded(lambda: doctor(config, pipeline_name), config.type))


def _guarded(produce: Callable[[], Sequence[Check]], what: str) -> list[Check]:
    """A plugin's checks; one that raised is one failed check (its message redacted), not a
    crashed command: the checks after it still run."""
    try:
        return list(produce())
    except Exception as exc:  # any failure of a check is its outcome
        return [
            failed(
                "checks",
                f"{what} checks failed: {redact(str(exc))}",
                "fix what the message names, then run cdc doctor again",
            )
        ]


def _scoped(scope: str, checks: Sequence[Check]) -> list[Check]:
    return [replace(check, scope=scope) for check in checks]


def _log_checks(pipeline: Pipeline) -> list[Check]:
    config = pipeline.log
    if isinstance(config, EmbeddedLogConfig):
        return [writable_dir("path", pipeline.log_path(), "log.path")]
    from cdc.log.kafka.doctor import kafka_checks

    checks = _guarded(lambda: kafka_checks(config, pipeline.name), "kafka log")
    return [*checks, writable_dir("state_path", pipeline.state_path(), "log.state_path")]


def writable_dir(name: str, path: Path, setting: str) -> Check:
    """Whether files can be created in directory ``path``, or in the nearest existing directory
    above it when it does not exist yet (the sink or log creates it).

    A probe file is created and removed: permission bits alone do not tell (root, ACLs,
    read-only mounts).
    """
    target = path
    while not target.exists() and target != target.parent:
        target = target.parent
    if not target.is_dir():
        return failed(
            name,
            f"{path} cannot be a directory: {target} is a file",
            f"point {setting} at a directory",
        )
    try:
        with tempfile.TemporaryFile(dir=target, prefix=".cdc-doctor-"):
            pass
    except OSError as exc:
        return failed(
            name,
            f"cannot create files in {target}: {exc.strerror}",
            f"make {target} writable by user {_user()} (or change {setting})",
        )
    if target == path:
        return passed(name, f"{path} exists, writable")
    return passed(name, f"{path} will be created in {target.resolve()}, writable")


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return str(os.geteuid())


def render_text(checks: Sequence[Check]) -> list[str]:
    """One line a check: ``ok``, ``warn`` or ``FAIL``, where, what, and the fix."""
    marks = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}
    lines = []
    for check in checks:
        line = f"{marks[check.level]}  [{check.scope}] {check.name}: {check.detail}"
        if check.fix and check.level != "ok":
            line += f" -> fix: {check.fix}"
        lines.append(line)
    failures = sum(1 for c in checks if not c.ok)
    warnings = sum(1 for c in checks if c.warning and c.ok)
    lines.append(f"{len(checks)} checks: {failures} failed, {warnings} warnings")
    return lines


def render_json(checks: Sequence[Check]) -> str:
    """``{"ok": ..., "checks": [...]}``, the same checks as the text."""
    report = {"ok": all(c.ok for c in checks), "checks": [c.to_json() for c in checks]}
    return orjson.dumps(report, option=orjson.OPT_INDENT_2).decode()


def exit_code(checks: Sequence[Check]) -> int:
    """0 when no check failed, else 1."""
    return 0 if all(c.ok for c in checks) else 1
