"""``cdc doctor`` for the SQLite sink: the library is recent enough, and the file can be
created, or opened and written. Nothing is changed in the file."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

from cdc.contracts.checks import Check, failed, passed, warned, writable_dir

from cdc_sink_sqlite import store
from cdc_sink_sqlite.config import SqliteSinkConfig


def doctor(config: SqliteSinkConfig, pipeline_name: str) -> list[Check]:
    """The checks, each ok or with its fix; ``pipeline_name`` is not needed (the file is the
    sink's own)."""
    return [_version(), _file(Path(config.path))]


def _version() -> Check:
    have, need = sqlite3.sqlite_version, ".".join(map(str, store.MIN_VERSION))
    if sqlite3.sqlite_version_info < store.MIN_VERSION:
        fix = f"use a Python whose sqlite3 module links SQLite {need} or later"
        return failed("sqlite version", f"SQLite {have}: UPSERT needs {need}", fix)
    return passed("sqlite version", f"SQLite {have}")


def _file(path: Path) -> Check:
    if path.is_dir():
        return failed("path", f"{path} is a directory", "point path at a database file")
    if not path.exists():
        check = writable_dir("path", path.parent, "path")
        return replace(check, detail=f"{path} does not exist yet; {check.detail}")
    # WAL mode writes <file>-wal and <file>-shm beside the file: the directory must be writable.
    directory = writable_dir("path", path.parent, "path")
    if not directory.ok:
        return directory
    try:
        con = sqlite3.connect(path, timeout=0.1, isolation_level=None)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            # Takes the write lock and gives it back: proves the file is writable and free.
            con.execute("BEGIN IMMEDIATE")
            con.execute("ROLLBACK")
        finally:
            con.close()
    except sqlite3.Error as exc:
        if getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED"):
            fix = "stop the other writer, or wait for its transaction to end"
            return warned("path", f"{path} is being written by another connection", fix)
        fix = "point path at a SQLite file this user may write, or remove the file"
        return failed("path", f"{path} cannot be written: {exc}", fix)
    return passed("path", f"{path} opens for writing")
