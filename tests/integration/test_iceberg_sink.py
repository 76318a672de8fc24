"""The Iceberg sink against a real pyiceberg SQL catalog (SQLite) and a local warehouse: the
conformance kit, replays, reorderings, remembered deletes, truncates, composite keys, commits in
batches with the offsets in the snapshot summary, and a crash between two tables' commits.

Schema evolution, types, append mode and errors are in ``test_iceberg_sink_more.py``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.contracts.errors import SinkUnavailable
from cdc.contracts.events import ChangeEvent, Op
from cdc.contracts.schema import Column
from cdc.contracts.sink import Sink, SinkContext, SinkRecord
from cdc.envelope import encode as envelope
from cdc.log.base import TopicPartition
from cdc.support.logging import get_logger
from cdc.testing.conformance import SinkConformance
from sinks.iceberg import IcebergSink, IcebergSinkConfig, read_rows
from sinks.iceberg.sink import open_catalog
from tests.integration.duckdb_kit import PIPELINE, Schemas, event, item

ITEMS = (
    Column("id", "bigint", key=True, nullable=False),
    Column("name", "text"),
    Column("qty", "integer"),
)


def lake_config(root: Path, **options: Any) -> IcebergSinkConfig:
    catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db"}
    return IcebergSinkConfig(
        name="lake", catalog=catalog, warehouse=str(root / "wh"), commit_interval_s=0, **options
    )


class TestIcebergConformance(SinkConformance):
    def make_sink(self, context: SinkContext) -> Sink:
        return IcebergSink(lake_config(self.kit_dir / "lake"), context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        config = lake_config(self.kit_dir / "lake")
        return {k["id"]: r for k, r in read_rows(config, "public", "kit_items", pipeline="kit")}


class Lake:
    """A sink over one catalog and warehouse; ``apply`` writes and flushes as the runner does."""

    def __init__(self, root: Path, **options: Any) -> None:
        self.config = lake_config(root, **options)
        self.schemas = Schemas()
        self.schemas.publish("items", *ITEMS)
        self.next: dict[str, int] = {}
        self.sink = self.new_sink()

    def new_sink(self) -> IcebergSink:
        context = SinkContext(PIPELINE, "lake", [("public", "items")], self.schemas, get_logger())
        sink = IcebergSink(self.config, context)
        sink.open()
        return sink

    def reopen(self) -> None:
        self.sink.close()
        self.sink = self.new_sink()

    def crash(self) -> None:
        """A new sink over the store, the old one dropped as a killed process leaves it."""
        self.sink = self.new_sink()

    def records(self, *events: ChangeEvent) -> list[SinkRecord]:
        out = []
        for record in (r for e in events for r in envelope.to_records(e, PIPELINE, now_ms=0)):
            offset = self.next.get(record.topic, 0)
            self.next[record.topic] = offset + 1
            value = None if record.value is None else orjson.loads(record.value)
            key = orjson.loads(record.key or b"null")
            out.append(SinkRecord(record.topic, 0, offset, key, value, pos=record.pos))
        return out

    def apply(self, *events: ChangeEvent) -> list[SinkRecord]:
        records = self.records(*events)
        self.sink.write(records)
        self.sink.flush()
        return records

    def rows(self, table: str = "items") -> dict[Any, dict[str, Any]]:
        found = read_rows(self.config, "public", table, pipeline=PIPELINE)
        return {tuple(k.values()) if len(k) > 1 else k["id"]: r for k, r in found}

    def names(self) -> dict[Any, tuple[Any, Any]]:
        return {k: (r["name"], r["qty"]) for k, r in self.rows().items()}

    def table(self, name: str = "items") -> Any:
        return open_catalog(self.config).load_table((PIPELINE, name))


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(tmp_path)


def test_newest_change_per_key_wins_and_replays_change_nothing(lake: Lake) -> None:
    changes = [
        item(Op.CREATE, 1, 10, "v1", 1),
        item(Op.UPDATE, 1, 12, "v3", 3),
        item(Op.UPDATE, 1, 11, "v2", 2),  # older, from another partition in real life
        item(Op.CREATE, 2, 13, "x", 1),
        item(Op.DELETE, 2, 14),
        item(Op.CREATE, 3, 15, "c", 1),
    ]
    lake.apply(*changes)
    assert lake.names() == {1: ("v3", 3), 3: ("c", 1)}
    for change in reversed(changes):  # every change again, one a batch, newest first
        lake.apply(change)
    lake.apply(*reversed(changes))
    assert lake.names() == {1: ("v3", 3), 3: ("c", 1)}


def test_a_delete_is_remembered_against_an_older_upsert_replayed(lake: Lake) -> None:
    lake.apply(item(Op.CREATE, 1, 10, "a", 1))
    lake.apply(item(Op.DELETE, 1, 40))
    lake.reopen()  # remembered durably, in the table, not in the sink's memory
    lake.apply(item(Op.UPDATE, 1, 35, "zombie", 4))
    assert lake.names() == {}
    deleted = lake.table().scan(selected_fields=("id", "_cdc_pos", "_cdc_deleted")).to_arrow()
    assert deleted.to_pylist() == [{"id": 1, "_cdc_pos": 40, "_cdc_deleted": True}]
    lake.apply(item(Op.CREATE, 1, 50, "back", 5))  # a newer insert brings the key back
    assert lake.names() == {1: ("back", 5)}


def test_truncate_empties_the_table_and_refuses_older_changes(lake: Lake) -> None:
    lake.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    truncate = event(Op.TRUNCATE, {}, None, 20)
    lake.apply(item(Op.CREATE, 3, 19, "c", 3), truncate, item(Op.CREATE, 4, 21, "d", 4))
    assert lake.names() == {4: ("d", 4)}
    lake.reopen()
    lake.apply(item(Op.UPDATE, 2, 15, "old", 9))  # before the truncate: stays out
    assert lake.names() == {4: ("d", 4)}


def test_composite_keys(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.schemas.publish(
        "lines",
        Column("order_id", "bigint", key=True, nullable=False),
        Column("line_no", "integer", key=True, nullable=False),
        Column("qty", "integer"),
    )
    lake.sink.close()
    lake.sink = IcebergSink(
        lake.config,
        SinkContext(PIPELINE, "lake", [("public", "lines")], lake.schemas, get_logger()),
    )
    lake.sink.open()

    def line(op: Op, order: int, no: int, pos: int, qty: int = 0) -> ChangeEvent:
        key = {"order_id": order, "line_no": no}
        return event(op, key, None if op is Op.DELETE else {**key, "qty": qty}, pos, table="lines")

    lake.apply(
        line(Op.CREATE, 1, 1, 10, 5), line(Op.CREATE, 1, 2, 11, 6), line(Op.CREATE, 2, 1, 12, 7)
    )
    lake.apply(
        line(Op.UPDATE, 1, 2, 13, 60), line(Op.DELETE, 2, 1, 14), line(Op.UPDATE, 1, 1, 9, 99)
    )
    assert {k: r["qty"] for k, r in lake.rows("lines").items()} == {(1, 1): 5, (1, 2): 60}


def test_commits_wait_for_the_interval_or_max_rows_with_the_offsets_in_the_summary(
    tmp_path: Path,
) -> None:
    lake = Lake(tmp_path, max_rows=3)
    object.__setattr__(lake.config, "commit_interval_s", 3600.0)
    lake.sink.close()
    lake.sink = lake.new_sink()
    lake.apply(item(Op.CREATE, 1, 10, "a", 1))  # a partition new to the table: committed now
    assert lake.names() == {1: ("a", 1)}
    lake.apply(item(Op.CREATE, 2, 11, "b", 2))
    lake.apply(item(Op.CREATE, 3, 12, "c", 3))
    assert lake.names() == {1: ("a", 1)}  # buffered: under max_rows, inside the interval
    lake.crash()  # the buffer is lost, the stored offsets say where to read again
    topic = TopicPartition(f"{PIPELINE}.public.items", 0)
    assert lake.sink.stored_offsets() == {topic: 1}
    assert lake.table().current_snapshot().summary["cdc.offsets"] == '{"shop.public.items|0":1}'
    lake.sink.write(lake.records(item(Op.CREATE, 2, 11, "b", 2), item(Op.CREATE, 3, 12, "c", 3)))
    lake.apply(item(Op.CREATE, 4, 13, "d", 4))  # the third buffered row: committed
    assert sorted(lake.names()) == [1, 2, 3, 4]
    assert lake.sink.stored_offsets() == {topic: 6}


def test_a_crash_between_two_tables_commits_resumes_each_from_its_own_offsets(
    tmp_path: Path,
) -> None:
    lake = Lake(tmp_path)
    lake.schemas.publish("other", *ITEMS)
    tables = [("public", "items"), ("public", "other")]
    context = SinkContext(PIPELINE, "lake", tables, lake.schemas, get_logger())
    lake.sink.close()
    first = IcebergSink(lake.config, context)
    first.open()
    batch = lake.records(
        item(Op.CREATE, 1, 10, "a", 1),
        event(Op.CREATE, {"id": 7}, {"id": 7, "name": "o", "qty": 7}, 11, table="other"),
    )
    first.write(batch)
    first.flush()
    later = lake.records(
        item(Op.UPDATE, 1, 20, "a2", 2),
        event(Op.UPDATE, {"id": 7}, {"id": 7, "name": "o2", "qty": 8}, 21, table="other"),
    )
    first.write(later)
    # The crash: items' commit lands, other's does not (the process dies between them).
    first._commit(("public", "items"), first._pending[("public", "items")])
    second = IcebergSink(lake.config, context)
    second.open()
    items, other = (TopicPartition(f"{PIPELINE}.public.{t}", 0) for t in ("items", "other"))
    assert second.stored_offsets() == {items: 2, other: 1}
    # The runner reads each partition again from its stored offset: all of the later batch
    # for other, none of it for items.
    second.write([r for r in later if r.offset >= second.stored_offsets()[r.tp]])
    second.flush()
    assert lake.names() == {1: ("a2", 2)}
    assert {k: r["name"] for k, r in lake.rows("other").items()} == {7: "o2"}
    assert second.stored_offsets() == {items: 2, other: 2}


def test_two_writers_of_a_table_conflict_retry_and_keep_each_others_offsets(
    tmp_path: Path,
) -> None:
    lake = Lake(tmp_path)
    lake.apply(item(Op.CREATE, 1, 10, "a", 1))
    first, second = lake.sink, lake.new_sink()
    items = ("public", "items")
    first._table(items, lake.schemas.get(*items))  # the metadata version it will commit on
    # The second worker reads partition 1 of the topic (on Kafka, another worker's share).
    theirs = [
        replace(r, partition=1, offset=0) for r in lake.records(item(Op.CREATE, 2, 12, "b", 2))
    ]
    second.write(theirs)
    second.flush()
    ours = lake.records(item(Op.UPDATE, 1, 11, "a2", 2))
    first.write(ours)
    with pytest.raises(SinkUnavailable):  # the catalog refuses a commit on a replaced version
        first.flush()
    first.write(ours)  # the runner retries the batch
    first.flush()
    # Without a race: each commit keeps the other worker's offsets of the table's last commit.
    made = lake.records(item(Op.UPDATE, 2, 13, "b2", 3))
    second.write([replace(r, partition=1, offset=1) for r in made])
    second.flush()
    ours = lake.records(item(Op.UPDATE, 1, 14, "a3", 3))
    first.write(ours)
    first.flush()
    assert lake.names() == {1: ("a3", 3), 2: ("b2", 3)}
    topic = f"{PIPELINE}.public.items"
    reopened = lake.new_sink()
    ends = {TopicPartition(topic, 0): ours[-1].offset + 1, TopicPartition(topic, 1): 2}
    assert reopened.stored_offsets() == ends
    made = lake.records(item(Op.UPDATE, 2, 15, "b3", 4))
    second.write([replace(r, partition=1, offset=2) for r in made])
    second.flush()
    # Partition 1 assigned to the first worker now (a rebalance): it starts where the other
    # worker's commit left it, not where its own last commit saw it.
    assert first.stored_offsets() == {**ends, TopicPartition(topic, 1): 3}
