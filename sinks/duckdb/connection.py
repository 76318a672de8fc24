"""Opening the warehouse file, and DuckDB's errors in the framework's terms.

DuckDB allows one writing process per file and holds an exclusive lock while it is open; a
second process gets an ``IOException`` naming the holder. That is :class:`SinkUnavailable` (the
runner retries with backoff until the other process lets go); a path that can never work (a
directory, no permission, not a DuckDB file) is :class:`SinkFatal`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from cdc.contracts.errors import SinkError, SinkFatal, SinkUnavailable


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def is_lock_conflict(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


def connect(
    path: Path,
    threads: int | None = None,
    memory_limit: str | None = None,
    checkpoint_threshold: str | None = None,
) -> Any:
    """Open ``path`` for writing, creating its directory and the file if missing.

    Raises:
        SinkUnavailable: another process holds the file.
        SinkFatal: the path cannot be a DuckDB database.
    """
    if path.is_dir():
        raise SinkFatal(f"DuckDB sink: {path} is a directory; path must name a database file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SinkFatal(f"DuckDB sink: cannot create {path.parent}: {exc.strerror}") from exc
    settings: dict[str, Any] = {}
    if threads is not None:
        settings["threads"] = threads
    if memory_limit is not None:
        settings["memory_limit"] = memory_limit
    if checkpoint_threshold is not None:
        settings["checkpoint_threshold"] = checkpoint_threshold
    try:
        return duckdb.connect(str(path), config=settings)
    except duckdb.Error as exc:
        raise translate(exc, f"opening {path}") from exc


def translate(exc: BaseException, doing: str, detail: str | None = None) -> SinkError:
    """The framework error for a DuckDB error met while ``doing``; ``detail`` replaces DuckDB's
    message (which can quote data)."""
    message = f"DuckDB sink: {doing}: {detail or first_line(exc)}"
    if is_lock_conflict(exc):
        return SinkUnavailable(
            f"{message} (DuckDB allows one writing process per file; retrying until it is free)"
        )
    if isinstance(exc, duckdb.IOException | duckdb.TransactionException):
        if "permission" in str(exc).lower() or "not a valid" in str(exc).lower():
            return SinkFatal(message)
        return SinkUnavailable(message)
    return SinkFatal(message)
