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
``executemany`` runs, with the same result. Which one runs is decided once, at import
(:data:`SELECTION`, with the reason), logged as ``native.selected`` when a command opens the
log, and shown by ``cdc status``.

Both sit behind one interface, :class:`Appender`: :class:`PythonAppender` (``executemany``, the
reference) and :class:`RustAppender`, which hands a batch it cannot take (a key or value that is
not bytes) to the Python one itself. A log chooses one when it opens (:func:`choose`); no
transaction decides a fallback.
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, Protocol

from cdc.log.base import Record
from cdc.log.embedded import frames
from cdc.log.embedded.heads import Known, head_of, strip
from cdc.log.embedded.store import INSERT_FRAMED, INSERT_RECORD, translate_code, translated
from cdc.support.logging import get_logger

_LIBRARY: Final = "libsqlite3.so.0"
# CPython versions whose connection object starts with the sqlite3 handle (checked by hand).
_KNOWN_LAYOUT: Final = ((3, 11), (3, 12), (3, 13))


class Selection(NamedTuple):
    """Which appender runs in this process, and why (the same fields as the row encoder's)."""

    implementation: Literal["rust", "python"]
    reason: str


def _interpreter() -> tuple[str, tuple[int, int]]:
    """The interpreter's name and version (a function, so a test can pretend another)."""
    return sys.implementation.name, (sys.version_info[0], sys.version_info[1])


def _layout_problem() -> str | None:
    """Why this interpreter's connection object cannot be read, if it cannot."""
    name, version = _interpreter()
    if name != "cpython":
        return f"{name} is not CPython, whose connection object layout the appender reads"
    if version not in _KNOWN_LAYOUT:
        first, last = _KNOWN_LAYOUT[0], _KNOWN_LAYOUT[-1]
        return (
            f"Python {version[0]}.{version[1]} is outside {first[0]}.{first[1]}\u2013"
            f"{last[0]}.{last[1]}, the versions whose connection object layout is known"
        )
    return None


def _open_library() -> tuple[Any, str]:
    """The loaded SQLite library's functions, or ``None`` and why not."""
    try:
        import _sqlite3

        from cdc.log.embedded import _native  # type: ignore[attr-defined]
    except ImportError:
        return None, "not built (no Rust toolchain when the package was installed)"
    try:
        library = _native.Sqlite(_LIBRARY, _sqlite3.__file__)
    except OSError as exc:  # not loaded, a symbol missing, or the module's own copy of SQLite
        return None, str(exc)
    except AttributeError:
        return None, "the built extension has no Sqlite class (an old build: reinstall)"
    if not hasattr(library, "frame"):  # built before value frames: its append binds no frame
        return None, "the built extension cannot store value frames (an old build: reinstall)"
    major, minor, patch = sqlite3.sqlite_version_info
    loaded = int(library.version())
    wanted = sqlite3.sqlite_version
    if loaded != major * 1_000_000 + minor * 1000 + patch:
        found = f"{loaded // 1_000_000}.{loaded // 1000 % 1000}.{loaded % 1000}"
        return None, f"{_LIBRARY} is SQLite {found}, not the sqlite3 module's {wanted}"
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return library, f"CPython {python}, {_LIBRARY} {wanted}"


def select() -> tuple[Any, Selection]:
    """Decide which appender runs: the native library, or ``None`` for ``executemany``."""
    if os.environ.get("CDC_NATIVE", "1") == "0":
        return None, Selection("python", "CDC_NATIVE=0")
    problem = _layout_problem()
    if problem is not None:
        return None, Selection("python", problem)
    library, reason = _open_library()
    return library, Selection("python" if library is None else "rust", reason)


_SQLITE, SELECTION = select()
_announced = False


def available() -> bool:
    """Whether the native appender was built and may be used here."""
    return _SQLITE is not None


def announce(level: str = "debug") -> None:
    """Log ``native.selected`` with :data:`SELECTION`, once per process: when the fast path is
    off, the log line says why. :func:`cdc.log.factory.open_log` calls it, as every command
    that opens a pipeline's embedded log does, at debug level: a command's stderr is its
    answer's (``cdc status`` shows the appender in its report). ``cdc run`` announces first,
    at info: its log is the run's record."""
    global _announced
    if not _announced:
        _announced = True
        implementation, reason = SELECTION
        logger = get_logger(component="log_appender")
        log = logger.info if level == "info" else logger.debug
        log("native.selected", implementation=implementation, reason=reason)


#: :meth:`NativeAppender.append`'s code for a value whose head is not among the known ones.
UNKNOWN_HEAD: Final = -1


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
        heads: Known,
        frame: tuple[int, bytes, bytes] | None = None,
    ) -> tuple[int, str] | None:
        """Insert ``records`` with ``sql`` (parameters: topic id, partition, offset, key, value,
        timestamp, head id, position, frame id), offsets from ``first``, each value that starts
        with one of ``heads`` without it (:func:`cdc.log.embedded.heads.strip`), then without
        ``frame``'s prefix and suffix if it has both (``(id, prefix, suffix)``,
        :mod:`cdc.log.embedded.frames`); ``None``, SQLite's extended error code and message, or
        :data:`UNKNOWN_HEAD` and the index of a record whose value is wrapped in a head not
        among ``heads`` (then nothing was inserted).

        Raises:
            TypeError: a key or value that is not bytes or ``None``, or the connection is
                closed: nothing was inserted, and ``executemany`` may take over.
        """
        handle = _handle(self._conn)  # read again each time: a closed connection has none
        if not handle:
            raise TypeError("the connection is closed")
        result: tuple[int, str] | None = _SQLITE.append(
            handle, sql, topic_id, partition, first, ts_ms, records, heads, frame
        )
        return result

    def frame(self, records: list[Record], heads: Known) -> tuple[bytes, bytes] | None:
        """The prefix and suffix the values of ``records`` share inside their ``heads``, when
        there are enough of them and it holds enough bytes (:mod:`cdc.log.embedded.frames`);
        ``None`` too when a value's head is not among ``heads``.

        Raises:
            TypeError: a value that is not bytes or ``None``.
        """
        found: tuple[bytes, bytes] | None = _SQLITE.frame(
            records, heads, frames.MIN_RECORDS, frames.MIN_BYTES
        )
        return found


class HeadBook(Protocol):
    """The value heads a transaction may store values without (:mod:`cdc.log.embedded.heads`):
    the committed ones and its own, and a new one stored when a value has a head not yet known."""

    def known(self, topic_id: int) -> Known: ...

    def store_head(self, topic_id: int, value: bytes | None) -> None: ...


class Appender(Protocol):
    """Inserts one partition's records at consecutive offsets from ``first``, in the open
    transaction of ``conn``, each wrapped value without its head."""

    def insert(
        self,
        conn: sqlite3.Connection,
        heads: HeadBook,
        where: frames.Range,
        ts_ms: int,
        records: list[Record],
    ) -> None: ...


class PythonAppender:
    """``executemany``: the reference implementation."""

    def insert(
        self,
        conn: sqlite3.Connection,
        heads: HeadBook,
        where: frames.Range,
        ts_ms: int,
        records: list[Record],
    ) -> None:
        tid, first = where.topic_id, where.first
        rows = []
        for i, record in enumerate(records):
            value, head_id = strip(record.value, heads.known(tid))
            if head_id is None and isinstance(value, bytes) and head_of(value) is not None:
                heads.store_head(tid, value)  # a head this topic's writer has not seen
                value, head_id = strip(value, heads.known(tid))
            rows.append(
                (tid, where.partition, first + i, record.key, value, ts_ms, head_id, record.pos)
            )
        with translated("appending records"):
            conn.executemany(INSERT_RECORD, rows)


class RustAppender:
    """The native loop, with the interpreter lock released for the whole batch; a batch it
    cannot take goes to ``python``, with the same result."""

    def __init__(self, python: PythonAppender) -> None:
        self._python = python

    def insert(
        self,
        conn: sqlite3.Connection,
        heads: HeadBook,
        where: frames.Range,
        ts_ms: int,
        records: list[Record],
    ) -> None:
        try:
            failed = self._append(NativeAppender(conn), conn, heads, where, ts_ms, records)
        except TypeError:  # not bytes, or closed: executemany accepts it or says why
            self._python.insert(conn, heads, where, ts_ms, records)
            return
        if failed is not None:
            code, detail = failed
            raise translate_code(code, f"{detail} (code {code})", "appending records")

    def _append(
        self,
        native: NativeAppender,
        conn: sqlite3.Connection,
        heads: HeadBook,
        where: frames.Range,
        ts_ms: int,
        records: list[Record],
    ) -> tuple[int, str] | None:
        """The native append's result, after storing every head it did not know (it inserts
        nothing until it knows them all), with the batch's frame where it has one."""
        tid = where.topic_id
        frame = None  # stored once: a frame no record uses would never be collected
        while True:
            known = heads.known(tid)
            if frame is None and len(records) >= frames.MIN_RECORDS:
                found = native.frame(records, known)  # None while a head is unknown
                if found is not None:
                    with translated("storing a value frame"):
                        frame = (frames.store(conn, *found, where), *found)
            try:
                failed = native.append(
                    INSERT_FRAMED, tid, where.partition, where.first, ts_ms, records, known, frame
                )
            except TypeError:
                # The Python appender takes over, without the frame: it goes now, as nothing
                # else would ever collect a frame no record was stored with.
                if frame is not None:
                    with translated("storing a value frame"):
                        frames.collect(conn, [frame[0]])
                raise
            if failed is None or failed[0] != UNKNOWN_HEAD:
                return failed
            heads.store_head(tid, records[int(failed[1])].value)


def choose(conn: sqlite3.Connection, database: Path) -> Appender:
    """The appender of a log at ``database``, chosen once from one of its connections: the
    native one when :data:`SELECTION` picked it and ``conn``'s handle is the log's file."""
    python = PythonAppender()
    if _SQLITE is None:
        return python
    handle = _handle(conn)
    if not handle or _SQLITE.filename(handle) != str(database.resolve()):
        return python
    return RustAppender(python)


def _handle(conn: sqlite3.Connection) -> int | None:
    # CPython's pysqlite_Connection: the object header, then ``sqlite3 *db`` (NULL once closed).
    handle: int | None = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
    return handle
