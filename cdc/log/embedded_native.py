"""The embedded log's optional native appender (``cdc/log/native``, Rust): a batch of records into
SQLite with the interpreter lock released for the whole batch.

Why: ``executemany`` binds every row from Python objects and drops and retakes the interpreter
lock around each row's step, so the log's writer thread convoys with any thread that has Python
work to do (the snapshot's readers), and binding costs about a microsecond a row. The native
loop binds and steps on the caller's own connection, inside the transaction it opened, through
the same SQLite library the :mod:`sqlite3` module loaded (a second copy of SQLite in one process
would break its file locks; the Rust side only looks symbols up in the loaded one).

The connection's ``sqlite3 *`` is read from CPython's connection object, where it is the first
field after the object header (``Modules/_sqlite/connection.h``, 3.11 to 3.13). It is used only
on those versions, only when the library's version equals :data:`sqlite3.sqlite_version_info`,
and only when ``sqlite3_db_filename`` of the handle names the log's own file. Anything else, no
Rust toolchain at install, or ``CDC_NATIVE=0``: ``executemany`` runs, with the same result.
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from cdc.log.base import Record

_LIBRARY: Final = "libsqlite3.so.0"
# CPython versions whose connection object starts with the sqlite3 handle (checked by hand).
_KNOWN_LAYOUT: Final = ((3, 11), (3, 12), (3, 13))


def _load() -> Any:
    if os.environ.get("CDC_NATIVE", "1") == "0":
        return None
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in _KNOWN_LAYOUT:
        return None
    try:
        from cdc.log import _native  # type: ignore[attr-defined]

        library = _native.Sqlite(_LIBRARY)
    except (ImportError, OSError):
        return None
    major, minor, patch = sqlite3.sqlite_version_info
    if library.version() != major * 1_000_000 + minor * 1000 + patch:
        return None  # not the library the sqlite3 module uses
    return library


_SQLITE: Final = _load()


def available() -> bool:
    """Whether the native appender was built and may be used here."""
    return _SQLITE is not None


class NativeAppender:
    """Appends through one connection's handle; see :func:`appender`."""

    def __init__(self, handle: int) -> None:
        self._handle = handle

    def append(
        self,
        sql: str,
        topic_id: int,
        partition: int,
        first: int,
        ts_ms: int,
        records: Sequence[Record],
    ) -> tuple[int, str] | None:
        """Insert ``records`` with ``sql`` (parameters: topic id, partition, offset, key, value,
        timestamp), offsets from ``first``; ``None``, or SQLite's extended error code and
        message. Keys and values must be bytes or ``None`` (``TypeError`` otherwise)."""
        result: tuple[int, str] | None = _SQLITE.append(
            self._handle, sql, topic_id, partition, first, ts_ms, records
        )
        return result


def appender(conn: sqlite3.Connection, database: Path) -> NativeAppender | None:
    """The native appender of ``conn``, an open connection to ``database``, or ``None``."""
    if _SQLITE is None:
        return None
    handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
    if not handle or _SQLITE.filename(handle) != str(database.resolve()):
        return None
    return NativeAppender(handle)
