"""The embedded log's optional native appender (``cdc/log/embedded/native``, Rust): a batch of
records into SQLite with the interpreter lock released for the whole batch.

Why: ``executemany`` binds every row from Python objects and drops and retakes the interpreter
lock around each row's step, so the log's writer thread convoys with any thread that has Python
work to do (the snapshot's readers), and binding costs about a microsecond a row. The native
loop binds and steps on the caller's own connection, inside the transaction it opened, through
the same SQLite library the :mod:`sqlite3` module loaded (a second copy of SQLite in one process
would break its file locks; the Rust side only looks symbols up in the loaded one).

The connection's ``sqlite3 *`` is read from CPython's connection object, where it is the first
field after the object header (``Modules/_sqlite/connection.h``, 3.11 to 3.13), at every append
(it is NULL once the connection is closed). It is used only on those versions, only when the
``_sqlite3`` module resolves SQLite to the loaded ``libsqlite3.so.0`` (not a copy linked into
it) of :data:`sqlite3.sqlite_version_info`, and only when ``sqlite3_db_filename`` of the handle
names the log's own file. Anything else, no Rust toolchain at install, or ``CDC_NATIVE=0``:
``executemany`` runs, with the same result.
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
import sys
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
        import _sqlite3

        from cdc.log.embedded import _native  # type: ignore[attr-defined]

        library = _native.Sqlite(_LIBRARY, _sqlite3.__file__)
    except (ImportError, OSError, AttributeError):  # no extension, or not the same SQLite
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
    """Appends through one connection; see :func:`appender`."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def append(
        self,
        sql: str,
        topic_id: int,
        partition: int,
        first: int,
        ts_ms: int,
        records: list[Record],
    ) -> tuple[int, str] | None:
        """Insert ``records`` with ``sql`` (parameters: topic id, partition, offset, key, value,
        timestamp), offsets from ``first``; ``None``, or SQLite's extended error code and
        message.

        Raises:
            TypeError: a key or value that is not bytes or ``None``, or the connection is
                closed: nothing was inserted, and ``executemany`` may take over.
        """
        handle = _handle(self._conn)  # read again each time: a closed connection has none
        if not handle:
            raise TypeError("the connection is closed")
        result: tuple[int, str] | None = _SQLITE.append(
            handle, sql, topic_id, partition, first, ts_ms, records
        )
        return result


def appender(conn: sqlite3.Connection, database: Path) -> NativeAppender | None:
    """The native appender of ``conn``, an open connection to ``database``, or ``None``."""
    if _SQLITE is None:
        return None
    handle = _handle(conn)
    if not handle or _SQLITE.filename(handle) != str(database.resolve()):
        return None
    return NativeAppender(conn)


def _handle(conn: sqlite3.Connection) -> int | None:
    # CPython's pysqlite_Connection: the object header, then ``sqlite3 *db`` (NULL once closed).
    handle: int | None = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
    return handle
