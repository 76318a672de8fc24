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

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import orjson

from cdc.config.models import EmbeddedLogConfig
from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.checks import Check, failed, passed, writable_dir
from cdc.support.redact import redact


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
