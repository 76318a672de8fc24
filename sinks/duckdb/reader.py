"""Read a table's current state back, for ``cdc verify`` and tests.

DuckDB lets one process write a file and holds a lock while it does, so a read-only open fails
while a pipeline runs. :func:`open_for_reading` therefore tries, in order: a read-only open; in
the same process as the writer, a connection to the writer's own database instance (DuckDB
refuses a second instance with another configuration); and when another process holds the lock
for longer than ``lock_wait_s``, a consistent copy of the file and its write-ahead log (copied
until neither changed during the copy), opened from a temporary directory. The copy shows the
last committed state as of the copy, which is what a verifier comparing at a position needs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from cdc.contracts.errors import SinkFatal, SinkUnavailable
from cdc.support.wait import WaitTimeout, wait_until
from sinks.duckdb.catalog import DOCUMENT_BODY, DOCUMENT_KEY, ColumnInfo, load_states, quote
from sinks.duckdb.connection import first_line, is_lock_conflict
from sinks.duckdb.types import normalize

_COPY_ATTEMPTS = 20
#: The buffer pool of a database instance opened only to read: a scan reads each block once, so
#: a cache only grows with the table (DuckDB's default limit is 80% of the machine's memory: a
#: 10M-row scan kept 57 MB of blocks, 1M rows 6 MB; with this limit 15 MB). A vector of large
#: values needs more (2,048 rows of 1 MB text: 512 MiB in one allocation): then the limit goes
#: back to DuckDB's default and the scan resumes where it was (:func:`_scan`).
SCAN_MEMORY_LIMIT = "16MiB"
_BATCH = 2000
#: The connections this module opened on instances of their own (read-only, or a copy), where a
#: scan may set :data:`SCAN_MEMORY_LIMIT`. In the writer's process the reader shares the writer's
#: instance (:func:`_connect`), whose settings are the sink's and never changed here. The limit is
#: set for a scan only, not at the open: DuckDB replays the write-ahead log while it opens a file,
#: and a logged batch of large values needs more than the limit; so does ``cdc trace``'s read of
#: one large row.
_OWN_INSTANCES: weakref.WeakSet[Any] = weakref.WeakSet()
_TEMPORAL = frozenset({"DATE", "TIMESTAMP", "TIMESTAMPTZ"})
_JSON_SOURCE = re.compile(r"jsonb?(?:\[\])*")


def read_rows(
    path: Path, schema: str, table: str, lock_wait_s: float = 0.5, *, json_text: bool = False
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Yield ``(key, row)`` for every row of ``schema.table``; nothing if the table is absent.

    Values are what DuckDB returns (``Decimal``, ``datetime``, lists, ``bytes``...), JSON
    columns parsed. Dates and timestamps Python cannot hold come back in the source's text:
    ``'infinity'``, ``'-infinity'``, and BC values such as ``'0044-03-15 12:00:00 BC'``. A
    schemaless table yields its ``_key`` and ``doc`` documents.

    ``json_text``: a ``json``/``jsonb`` column's documents as their JSON text (``'"str"'``,
    ``'null'``) instead of parsed: a parsed string scalar cannot be told from JSON text, and
    ``cdc verify`` (:func:`cdc.records.normalize.canonical`) reads text as JSON text.
    """
    with open_for_reading(path, lock_wait_s) as con:
        try:
            state = load_states(con).get((schema, table))
        except duckdb.CatalogException as exc:
            raise SinkFatal(f"DuckDB sink: {path} was not written by this sink (no _cdc)") from exc
        if state is None:
            return
        columns = state.columns
        select = ", ".join(quote(c.name) for c in columns)
        query = f"SELECT {select}, {_infinities(columns)} FROM {state.target}"
        with contextlib.closing(_scan(con, query)) as batches:
            width = len(columns)
            names = [c.name for c in columns]
            converters = [_converter(c, json_text) for c in columns]
            for rows in batches:
                for values in rows:
                    row = {
                        name: infinite or (v if convert is None or v is None else convert(v))
                        for name, convert, v, infinite in zip(
                            names, converters, values[:width], values[width:], strict=True
                        )
                    }
                    if state.layout == "document":
                        yield row[DOCUMENT_KEY], row[DOCUMENT_BODY]
                    else:
                        yield {c.name: row[c.name] for c in columns if c.key}, row


def _scan(con: Any, query: str) -> Generator[list[tuple[Any, ...]], None, None]:
    """The rows of ``query`` in batches, under :data:`SCAN_MEMORY_LIMIT` on an instance of its own.

    A vector too large for the limit raises DuckDB's out-of-memory error; the limit is then
    reset to DuckDB's default and the query run again, past the rows already given: a scan of
    one table without ``ORDER BY`` returns them in storage order (insertion order is
    preserved), and the file does not change under a read-only open or a copy.
    """
    limited = con in _OWN_INSTANCES
    if limited:
        con.execute(f"SET memory_limit = '{SCAN_MEMORY_LIMIT}'")
    given = 0
    try:
        while True:
            try:
                cursor = con.execute(query)
                skip = given
                while rows := cursor.fetchmany(_BATCH):
                    if skip:
                        rows, skip = rows[skip:], max(0, skip - len(rows))
                        if not rows:
                            continue
                    given += len(rows)
                    yield rows
                return
            except duckdb.OutOfMemoryException:
                if not limited:
                    raise
                limited = False
                con.execute("RESET memory_limit")
    finally:
        if limited:  # the instance may be closed by now: a reader that stopped early
            with contextlib.suppress(duckdb.Error):
                con.execute("RESET memory_limit")


def _infinities(columns: list[ColumnInfo]) -> str:
    """One more column per column: ``'infinity'``/``'-infinity'`` for an infinite value.

    Python's datetime stops at years 1 and 9999, so DuckDB hands infinities over as those
    limits, which are also real values: SQL must name them.
    """
    flags = []
    for column in columns:
        name = quote(column.name)
        if column.duck_type in _TEMPORAL:
            flags.append(
                f"CASE WHEN isinf({name}) THEN CASE WHEN {name} > "
                f"'2000-01-01'::{column.duck_type} THEN 'infinity' ELSE '-infinity' END END"
            )
        else:
            flags.append("NULL")
    return ", ".join(flags)


def _converter(column: ColumnInfo, json_text: bool) -> Callable[[Any], Any] | None:
    """:func:`_value` for one column, or ``None`` where it gives every value back as it is:
    chosen once a scan, not a value (about 5% of ``cdc verify``'s CPU)."""
    if column.duck_type in _TEMPORAL or column.duck_type.startswith("JSON"):
        return functools.partial(_value, column, json_text=json_text)
    return None  # any other DuckDB type: _value's every branch needs a temporal or JSON type


def _value(column: ColumnInfo, value: Any, json_text: bool = False) -> Any:
    if value is None:
        return None
    if column.duck_type in _TEMPORAL and isinstance(value, str) and " (BC)" in value:
        return duckdb_bc_to_source(value)
    if json_text and _JSON_SOURCE.fullmatch(normalize(column.source_type)):
        return value  # DuckDB hands JSON over as its text, a JSON[] as a list of texts
    if column.duck_type == "JSON":
        return json.loads(value)
    if column.duck_type.startswith("JSON["):
        return _loads_nested(value)
    return value


def duckdb_bc_to_source(text: str) -> str:
    """DuckDB's ``'0044-03-15 (BC) 12:00:00'`` as PostgreSQL writes it: ``'... 12:00:00 BC'``."""
    return text.replace(" (BC)", "", 1) + " BC"


def _loads_nested(value: Any) -> Any:
    if isinstance(value, list):
        return [_loads_nested(v) for v in value]
    return None if value is None else json.loads(value)


@contextmanager
def open_for_reading(path: Path, lock_wait_s: float = 0.5) -> Iterator[Any]:
    """A connection that can read ``path`` now, even while a pipeline writes it.

    Raises:
        SinkFatal: the file does not exist or is not a DuckDB database.
        SinkUnavailable: no stable copy could be taken while another process wrote.
    """
    if not path.is_file():
        raise SinkFatal(f"DuckDB sink: no database file at {path}")
    try:
        con = wait_until(lambda: _connect_unlocked(path), lock_wait_s, 0.1)
    except (WaitTimeout, duckdb.ConnectionException):
        con = None  # locked all along, or this process's writer refuses a second connection
    except duckdb.Error as exc:
        raise SinkFatal(f"DuckDB sink: cannot read {path}: {first_line(exc)}") from exc
    if con is None:
        with _snapshot(path) as copy:
            yield copy
        return
    try:
        yield con
    finally:
        con.close()


def _connect_unlocked(path: Path) -> Any:
    """A connection, or ``None`` while another process holds the file's lock."""
    try:
        return _connect(path)
    except duckdb.Error as exc:
        if is_lock_conflict(exc):
            return None
        raise


def _connect(path: Path) -> Any:
    try:
        return _own(duckdb.connect(str(path), read_only=True))
    except duckdb.ConnectionException:
        # This process writes the file: share the writer's database instance (DuckDB refuses
        # a second instance of one file in a process). A writer opened with other settings
        # refuses this too, and the caller falls back to a copy.
        return duckdb.connect(str(path))


@contextmanager
def _snapshot(path: Path) -> Iterator[Any]:
    with tempfile.TemporaryDirectory(prefix="cdc-duckdb-") as tmp:
        copy = Path(tmp) / path.name
        _stable_copy(path, copy)
        con = _own(duckdb.connect(str(copy)))
        try:
            yield con
        finally:
            con.close()


def _own(con: Any) -> Any:
    _OWN_INSTANCES.add(con)
    return con


def _stable_copy(path: Path, copy: Path) -> None:
    wal = path.with_name(path.name + ".wal")
    for _ in range(_COPY_ATTEMPTS):
        before = _stamp(path), _stamp(wal)
        shutil.copyfile(path, copy)
        if wal.exists():
            shutil.copyfile(wal, copy.with_name(copy.name + ".wal"))
        if (_stamp(path), _stamp(wal)) == before:
            return
        time.sleep(0.05)
    raise SinkUnavailable(f"DuckDB sink: {path} kept changing; no consistent copy to read")


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns
