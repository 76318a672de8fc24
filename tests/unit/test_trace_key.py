"""``cdc trace``'s pure parts: KEY parsing, each version's verdict for a sink, and finding a key's
records in a real embedded log (SQLite) by its key index and by a partition scan alike."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from cdc.cli.trace import TraceUsageError, check_table, parse_key, trace_key
from cdc.cli.trace_log import Version, key_versions
from cdc.cli.trace_sinks import canonicalizer, infer_held, verdicts
from cdc.config.pipeline import parse
from cdc.contracts.schema import Column, TableSchema
from cdc.envelope.encode import encode_key, write_pos
from cdc.envelope.options import READABLE
from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog


def _schema(*columns: Column) -> TableSchema:
    return TableSchema("postgresql", "public", "t", columns)


INT_KEY = _schema(Column("id", "integer", key=True), Column("v", "text"))
TEXT_KEY = _schema(Column("code", "character varying(10)", key=True))
TWO_KEYS = _schema(Column("a", "integer", key=True), Column("b", "text", key=True))


def test_a_bare_key_takes_the_column_s_type() -> None:
    assert parse_key("42", INT_KEY, "postgres") == {"id": 42}
    assert parse_key("0042", TEXT_KEY, "postgres") == {"code": "0042"}
    assert parse_key("cust-4711", TEXT_KEY, "postgres") == {"code": "cust-4711"}
    assert parse_key('"x"', TEXT_KEY, "postgres") == {"code": "x"}


def test_a_json_key_is_put_in_key_order_and_must_name_the_key_columns() -> None:
    key = parse_key('{"b": "x", "a": 1}', TWO_KEYS, "postgres")
    assert list(key.items()) == [("a", 1), ("b", "x")]
    for bad, schema in (('{"a": 1}', TWO_KEYS), ('{"nope": 1}', INT_KEY), ("1", TWO_KEYS)):
        with pytest.raises(TraceUsageError):
            parse_key(bad, schema, "postgres")


def test_a_mongodb_key_without_a_schema_is_its_id() -> None:
    assert parse_key('{"$oid": "65a0"}', None, "mongodb") == {"_id": {"$oid": "65a0"}}
    with pytest.raises(TraceUsageError):
        parse_key("7", None, "postgres")  # no schema published: name the key's columns


def _v(offset: int, position: int, op: str | None = "u") -> Version:
    return Version(0, offset, (position, 0), op, None if op in (None, "d") else {}, 1, 1)


def test_each_version_s_verdict() -> None:
    versions = [_v(0, 10), _v(1, 20), _v(2, 30), _v(3, 40), _v(4, 20), _v(5, 50), _v(6, 60)]
    letters = {2: "refused"}
    found = verdicts(versions, {0: 6}, letters, held=(40, 0))
    assert [v["verdict"] for v in found] == [
        "replaced",
        "replaced",
        "dead_lettered",
        "held",
        "stale",  # position 20 after 40 was applied: skipped by the guard
        "missing",  # consumed (offset 5 < 6), newer than what the sink holds
        "lagging",  # offset 6: the sink's next offset
    ]
    assert "offset 3" in str(found[4]["why"])


def test_a_tombstone_after_its_delete_is_not_stale() -> None:
    versions = [_v(0, 10, "c"), _v(1, 20, "d"), _v(2, 20, None)]
    assert [v["verdict"] for v in verdicts(versions, {0: 3}, {}, held=(20, 0))] == [
        "replaced",
        "held",
        "held",
    ]


def _append(log: EmbeddedLog, topic: str, keys: range, wrapped: bool = False) -> None:
    records = []
    for round_ in range(3):
        for key in keys:
            data = encode_key({"id": key})
            if wrapped:
                data = b'{"schema":{"type":"struct"},"payload":' + data + b"}"
            value = {"op": "u", "after": {"id": key, "v": round_}, "source": {"ts_ms": 5}}
            pos = write_pos(100 * round_ + key, 0)
            records.append(Record(topic, data, orjson.dumps(value), pos))
    tx = log.begin()
    tx.append(records)
    tx.commit()


class _NoIndex:
    """The log's own reads without its key lookup: how Kafka is read (a partition scan)."""

    def __init__(self, log: EmbeddedLog) -> None:
        self._log = log

    def __getattr__(self, name: str) -> Any:
        if name == "key_records":
            raise AttributeError(name)
        return getattr(self._log, name)


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_key_s_records_by_index_and_by_scan(tmp_path: Path, wrapped: bool) -> None:
    log = EmbeddedLog(tmp_path / "log", partitions=4)
    topic = "p.public.t"
    log.ensure_topics([topic])
    _append(log, topic, range(20), wrapped)
    pipeline = SimpleNamespace(name="p", envelope=SimpleNamespace(schemas_enable=wrapped))
    try:
        indexed, partitions, how = key_versions(log, pipeline, "public.t", {"id": 7})
        unindexed: Any = _NoIndex(log)
        scanned, _, scan = key_versions(unindexed, pipeline, "public.t", {"id": 7})
        home = log.partition_for(topic, b'{"id":7}')
    finally:
        log.close()
    assert how == ("partition scan" if wrapped else "key index") and scan == "partition scan"
    assert partitions == ([0, 1, 2, 3] if wrapped else [home])
    assert indexed == scanned
    assert [(v.row, v.position) for v in indexed] == [
        ({"id": 7, "v": r}, (100 * r + 7, 0)) for r in range(3)
    ]


def _row_version(offset: int, position: int, name: str | None) -> Version:
    op, row = ("d", None) if name is None else ("u", {"id": 1, "name": name})
    return Version(0, offset, (position, 0), op, row, 1, 1)


def test_a_sink_without_positions_holds_the_version_its_row_equals() -> None:
    canon = canonicalizer(None, READABLE, decoded=False)
    versions = [_row_version(0, 10, "a"), _row_version(1, 20, "b"), _row_version(2, 30, "c")]
    found = verdicts(versions, {0: 3}, {}, held=None)
    infer_held(versions, found, canon({"id": 1, "name": "b"}), canon)
    assert [v["verdict"] for v in found] == ["replaced", "held", "missing"]
    assert "inferred" in str(found[1]["why"])
    deleted = [*versions[:2], _row_version(2, 30, None)]
    gone = verdicts(deleted, {0: 3}, {}, held=None)
    infer_held(deleted, gone, None, canon)
    assert [v["verdict"] for v in gone] == ["replaced", "replaced", "held"]  # the delete


VIEW_PIPELINE = """
version: 1
name: shop
source:
  type: generator
  tables: [public.customers, public.orders]
views:
  - name: order_docs
    root: public.orders
    embed:
      - {field: customer, from: public.customers, on: {customer_id: id}}
sinks:
  - {name: files, type: jsonl, path: out/files, tables: [public.orders, views.order_docs]}
"""


def test_a_live_join_view_is_traced_in_the_log_and_sinks_not_at_the_source(
    tmp_path: Path,
) -> None:
    pipeline = parse(VIEW_PIPELINE, {})
    check_table(pipeline, "views.order_docs")
    with pytest.raises(TraceUsageError):
        check_table(pipeline, "views.nope")
    log = EmbeddedLog(tmp_path / "log")
    try:
        report = trace_key(pipeline, log, "views.order_docs", {"id": 1}, None)
    finally:
        log.close()
    assert report["versions"] == [] and report["found_by"] == "no topic yet"
    assert not report["source"]["readable"] and "view" in report["source"]["not_compared"]
    (files,) = report["sinks"]
    assert (files["state"], files["why"]) == ("unreadable", "jsonl sinks cannot be read back")
    assert report["diverged_at"] is None
