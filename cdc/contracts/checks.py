"""The preflight's vocabulary: what a plugin's ``doctor(config, pipeline_name)`` returns.

A check is ``ok`` (nothing to do), a *warning* (works, but deserves a look: still ok), or
failed, with ``fix``: the exact statement, setting or command that repairs it. ``cdc doctor``
(:mod:`cdc.cli.doctor`) runs every plugin's checks and renders them.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
