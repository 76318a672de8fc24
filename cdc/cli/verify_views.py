"""``cdc verify`` for live join views: each view's topic against the same join run on the
source's rows now (:func:`cdc.views.join.join_rows`).

A view that has not read its tables to their ends is reported LAGGING, as a sink is. Positions
are left out of the comparison: they say where a document's rows came from, not what it holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from cdc.cli.verify.comparison import TableComparison
from cdc.config.pipeline import Pipeline
from cdc.config.views import POSITIONS_FIELD, ViewConfig
from cdc.contracts import plugins
from cdc.contracts.events import topic_name
from cdc.log.base import Log, TopicPartition
from cdc.log.offsets import last_offsets
from cdc.support.wait import WaitTimeout, wait_until
from cdc.views import records as out
from cdc.views.join import Key, canonical_key, join_rows

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
        expected = join_rows(view, {t: _source_rows(pipeline, read, t) for t in view.inputs()})
        result = _compare(view.table, sink, expected, _view_documents(log, sink))
        if result.ok or attempt + 1 >= attempts:
            break
        time.sleep(wait_s)
    return result


def _source_rows(pipeline: Pipeline, read: Any, table: str) -> list[tuple[Any, Any]]:
    schema, _, name = table.partition(".")
    return list(read(pipeline.source, schema, name, envelope=pipeline.envelope))


def _lag(pipeline: Pipeline, log: Log, view: ViewConfig, wait_s: float) -> dict[str, Any]:
    """What the view has yet to read of its tables (empty: it read them to their ends),
    after waiting up to ``wait_s`` for it to catch up."""
    group = out.view_group(pipeline.name, view)
    topics = [topic_name(pipeline.name, *t.split(".", 1)) for t in view.inputs()]

    def behind() -> dict[str, Any]:
        committed = log.committed_offsets(group)
        left = {}
        for topic in topics:
            # After the last record, not the end offset: on Kafka, transaction markers take
            # offsets past it that the view's offsets (committed in its transactions) never do.
            for partition, end in last_offsets(log, topic).items():
                done = committed.get(TopicPartition(topic, partition), 0)
                if done < end:
                    left[f"{topic}[{partition}]"] = {"committed": done, "end": end}
        return left

    with contextlib.suppress(WaitTimeout):  # then reported as lagging
        wait_until(lambda: not behind(), wait_s, 0.1)
    return behind()


def _view_documents(log: Log, topic: str) -> dict[Key, dict[str, Any]]:
    """The view's current documents: each key's last record (a tombstone or delete: gone)."""
    docs: dict[Key, dict[str, Any]] = {}
    for partition, end in log.end_offsets(topic).items():
        offset = 0
        while offset < end:
            chunk = log.read(topic, partition, offset, 2000)
            if not chunk:
                break
            for record in chunk:
                _take(docs, record.key, record.value)
            offset = chunk[-1].offset + 1
    return docs


def _take(docs: dict[Key, dict[str, Any]], key: bytes | None, value: bytes | None) -> None:
    if key is None:
        return
    at = canonical_key(orjson.loads(key))
    after = None if value is None else orjson.loads(value).get("after")
    if after is None:
        docs.pop(at, None)
        return
    after.pop(POSITIONS_FIELD, None)
    docs[at] = after


def _compare(
    table: str, sink: str, expected: dict[Key, Any], actual: dict[Key, Any]
) -> TableComparison:
    result = TableComparison(table, sink, len(expected), len(actual))
    result.source_checksum = _checksum(expected.items())
    result.sink_checksum = _checksum(actual.items())
    result.missing = [orjson.loads(k) for k in sorted(expected.keys() - actual.keys())][:SHOWN]
    result.extra = [orjson.loads(k) for k in sorted(actual.keys() - expected.keys())][:SHOWN]
    different = [
        k for k in sorted(expected.keys() & actual.keys()) if _c(expected[k]) != _c(actual[k])
    ]
    result.different = [orjson.loads(k) for k in different][:SHOWN]
    return result


def _c(doc: Any) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def _checksum(items: Iterable[tuple[Key, Any]]) -> str:
    digest = hashlib.sha256()
    for key, doc in sorted(items):
        digest.update(key + b"\0" + _c(doc) + b"\n")
    return digest.hexdigest()[:16]
