"""``cdc doctor`` for the DuckDB sink: the file can be created, or opened for writing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import duckdb

from cdc.contracts.checks import Check, failed, passed, warned, writable_dir
from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.connection import first_line, is_lock_conflict


def doctor(config: DuckDBSinkConfig, pipeline_name: str) -> list[Check]:
    """A missing file needs a writable directory (the sink creates both); an existing one must
    open for writing. Opening it changes nothing in it."""
    path = Path(config.path)
    if path.is_dir():
        return [failed("path", f"{path} is a directory", "point path at a database file")]
    if not path.exists():
        check = writable_dir("path", path.parent, "path")
        return [replace(check, detail=f"{path} does not exist yet; {check.detail}")]
    try:
        duckdb.connect(str(path)).close()
    except duckdb.Error as exc:
        if is_lock_conflict(exc):
            detail = f"{path} is open in another process (a running pipeline?): {first_line(exc)}"
            return [warned("path", detail, "stop the other process before this sink starts")]
        fix = "point path at a DuckDB file this user may write, or remove the file"
        return [failed("path", f"{path} does not open: {first_line(exc)}", fix)]
    return [passed("path", f"{path} opens for writing")]
