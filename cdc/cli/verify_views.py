"""``cdc verify`` for live join views: each view's topic against the same join run on the
source's rows now (the view's own store, :mod:`cdc.views.store`).

Memory does not grow with the tables: the source's rows are loaded into a temporary store and
the view topic's documents into a temporary database beside it, and both sides are streamed
through the range-digest comparison of every table (:func:`cdc.verify.ranges.compare_streams`).

A view that has not read its tables to their ends is reported LAGGING, as a sink is. Positions
are left out of the comparison: they say where a document's rows came from, not what it holds.
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from cdc.cli.verify.comparison import TableComparison
from cdc.config.pipeline import Pipeline
from cdc.config.views import POSITIONS_FIELD, ViewConfig
from cdc.contracts import plugins
from cdc.log.base import Log
from cdc.support.wait import WaitTimeout, wait_until
from cdc.verify.ranges import Candidates, Found, KeyFilter, compare_streams
from cdc.views import records as out
from cdc.views.join import canonical_key
from cdc.views.progress import view_behind
from cdc.views.store import ViewStore, documents, load_rows

#: Keys listed per kind of difference, as the table comparison lists them.
SHOWN = 20


def without_views(pipeline: Pipeline, tables: Sequence[str]) -> tuple[str, ...] | None:
    """The tables ``cdc verify`` compares through the sinks' readers: ``tables`` (all when
    empty) less the views' tables, which only this module compares; ``None`` when that leaves
    none of what was asked."""
    views = {v.table for v in pipeline.views}
    held = [f"{s}.{t}" for sink in pipeline.sinks for s, t in pipeline.sink_tables(sink)]
    if not views & set(held):
        return tuple(tables)
    wanted = list(dict.fromkeys(tables or held))
    kept = tuple(t for t in wanted if t not in views)
    return kept or None


def verify_views(
    pipeline: Pipeline,
    log: Log,
    sinks: Sequence[str],
    tables: Sequence[str],
    attempts: int = 3,
    wait_s: float = 1.0,
    wait_for_view_s: float = 0.0,
) -> list[TableComparison]:
    """Compare each view asked for (every view, unless ``--sink`` or ``--table`` narrow the
    run to others) with the join of the source's rows; a difference is compared again up to
    ``attempts`` times, ``wait_s`` apart, as a workload may be in flight."""
    chosen = [v for v in pipeline.views if v.table in tables or not (sinks or tables)]
    return [_verify(pipeline, log, v, attempts, wait_s, wait_for_view_s) for v in chosen]


def _verify(
    pipeline: Pipeline, log: Log, view: ViewConfig, attempts: int, wait_s: float, lag_s: float
) -> TableComparison:
    sink = out.view_topic(pipeline.name, view)
    if pipeline.chain():
        reason = "a view over transformed tables is not compared yet (docs/views.md)"
        return TableComparison(view.table, sink, unverifiable=reason)
    read = getattr(plugins.load(plugins.SOURCE_GROUP, pipeline.source.type), "read_rows", None)
    if read is None:
        reason = f"the {pipeline.source.type} source cannot be read back"
        return TableComparison(view.table, sink, unverifiable=reason)
    result = TableComparison(view.table, sink)
    for attempt in range(max(1, attempts)):
        behind = _lag(pipeline, log, view, lag_s)
        if behind:
            return TableComparison(view.table, sink, lag=behind)
        result = _compare(pipeline, log, view, read, sink)
        if result.ok or attempt + 1 >= attempts:
            break
        time.sleep(wait_s)
    return result


def _source_rows(pipeline: Pipeline, read: Any, table: str) -> Any:
    schema, _, name = table.partition(".")
    return read(pipeline.source, schema, name, envelope=pipeline.envelope)


def _compare(
    pipeline: Pipeline, log: Log, view: ViewConfig, read: Any, topic: str
) -> TableComparison:
    """The source's join against the view topic's documents, both in temporary databases."""
    with tempfile.TemporaryDirectory(prefix="cdc-verify-view-") as tmp:
        expected = ViewStore(Path(tmp) / "source.sqlite", view)
        actual = _TopicDocuments(Path(tmp) / "view.sqlite")
        try:
            load_rows(expected, lambda table: _source_rows(pipeline, read, table))
            actual.load(log, topic)

            def source(wanted: KeyFilter | None) -> Iterator[Candidates]:
                return ([(k, _c(doc))] for k, doc in documents(expected, wanted))

            found = compare_streams(source, actual.entries)
        finally:
            expected.close()
            actual.close()
    return _result(view.table, topic, found)


def _result(table: str, topic: str, found: Found) -> TableComparison:
    result = TableComparison(table, topic)
    result.source_count, result.sink_count = found.counts
    result.source_checksum, result.sink_checksum = found.checksum(0), found.checksum(1)
    result.keys = (found.missing, found.extra, found.different)
    result.missing, result.extra, result.different = (
        [orjson.loads(k) for k in sorted(keys)[:SHOWN]] for keys in result.keys
    )
    return result


def _lag(pipeline: Pipeline, log: Log, view: ViewConfig, wait_s: float) -> dict[str, Any]:
    """What the view has yet to read of its tables (empty: it read them to their ends),
    after waiting up to ``wait_s`` for it to catch up."""
    with contextlib.suppress(WaitTimeout):  # then reported as lagging
        wait_until(lambda: not view_behind(log, pipeline, view), wait_s, 0.1)
    return dict(view_behind(log, pipeline, view))  # as cdc status reports it


class _TopicDocuments:
    """The view topic's current documents (each key's last record; a tombstone or delete:
    gone), positions left out, in a database on disk."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(str(path), isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=OFF")
        self._conn.execute("CREATE TABLE docs (k BLOB PRIMARY KEY, doc BLOB) WITHOUT ROWID")

    def close(self) -> None:
        self._conn.close()

    def load(self, log: Log, topic: str) -> None:
        self._conn.execute("BEGIN")
        for partition, end in log.end_offsets(topic).items():
            offset = 0
            while offset < end:
                chunk = log.read(topic, partition, offset, 2000)
                if not chunk:
                    break
                for record in chunk:
                    self._take(record.key, record.value)
                offset = chunk[-1].offset + 1
        self._conn.execute("COMMIT")

    def _take(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        at = canonical_key(orjson.loads(key))
        after = None if value is None else orjson.loads(value).get("after")
        if after is None:
            self._conn.execute("DELETE FROM docs WHERE k = ?", (at,))
            return
        after.pop(POSITIONS_FIELD, None)
        self._conn.execute("INSERT OR REPLACE INTO docs (k, doc) VALUES (?, ?)", (at, _c(after)))

    def entries(self, wanted: KeyFilter | None) -> Iterator[Candidates]:
        cursor = self._conn.execute("SELECT k, doc FROM docs ORDER BY k")
        with contextlib.closing(cursor):
            while rows := cursor.fetchmany(500):
                yield from ([(k, doc)] for k, doc in rows if wanted is None or wanted(k))


def _c(doc: Any) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
