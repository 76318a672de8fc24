"""The source task with table ops and transforms, on a real embedded log: what reaches which
topic, what a failing transform does under each ``bad_records`` policy, the shapes published
for sinks and for the source, and the fingerprint stored with the first commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.contracts.events import ChangeEvent, Op
from cdc.contracts.schema import Column, TableSchema, dead_letter_topic, schema_topic
from cdc.contracts.source import SourceBatch
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.fingerprints import OFFSET_KEY
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.source_task import BadRecordStop, SourceTask
from cdc.support.logging import get_logger
from cdc.testing import ScriptedSource, make_event
from cdc.transforms import TransformChain, TransformConfig, TransformShapeError, build_chain
from cdc.transforms.fields import AddFieldConfig, RenameFieldsConfig
from cdc.transforms.route import DEBEZIUM_KEY_FIELD, RouteConfig

PIPELINE = "p"
SHARDS = [("public", "orders_1"), ("public", "orders_2"), ("public", "items")]
MERGE = RouteConfig(match=r"public\.orders_\d+", topic="public.orders")


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EmbeddedLog]:
    log = EmbeddedLog(tmp_path / "log", partitions=1)
    yield log
    log.close()


def run(
    log: EmbeddedLog,
    source: ScriptedSource,
    transforms: TransformChain | None = None,
    bad_records: str = "fail",
    table_ops: Mapping[str, frozenset[str]] | None = None,
    first_commit: Mapping[str, Any] | None = None,
) -> BaseException | None:
    stop = threading.Event()
    task = SourceTask(
        PIPELINE,
        log,
        lambda: source,
        stop,
        get_logger(),
        poll_timeout_s=0.05,
        bad_records=bad_records,
        transforms=transforms if transforms is not None else build_chain([], PIPELINE),
        table_ops=table_ops,
        stored_with_first_commit=first_commit,
    )
    error: list[BaseException] = []

    def body() -> None:
        try:
            task.run()
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    deadline = time.monotonic() + 5
    # Until the script is used up, or the task stopped on an error before that.
    while thread.is_alive() and not source.drained.wait(0.02) and time.monotonic() < deadline:
        pass
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    return error[0] if error else None


def chain(*configs: TransformConfig) -> TransformChain:
    return build_chain(configs, PIPELINE, [f"{s}.{t}" for s, t in SHARDS])


def read(log: EmbeddedLog, topic: str) -> list[tuple[Any, Any]]:
    """``(key, value)`` of every record of ``topic``, decoded."""
    if topic not in {info.name for info in log.topics()}:
        return []
    out = []
    for partition in log.end_offsets(topic):
        for record in log.read(topic, partition, 0, 10_000):
            key = None if record.key is None else orjson.loads(record.key)
            value = None if record.value is None else orjson.loads(record.value)
            out.append((key, value))
    return out


def shard_event(table: str, key: int, op: Op = Op.CREATE, position: int = 1) -> ChangeEvent:
    change = make_event(key, op, position=position, table=table, secret="s3cret-value")
    if op is Op.TRUNCATE:
        return replace(change, key={}, after=None)
    return change


# -- ops -------------------------------------------------------------------------------------


def test_ops_filter_drops_other_operations_of_that_table_only(log: EmbeddedLog) -> None:
    source = ScriptedSource(
        [
            SourceBatch(
                events=[
                    make_event(1, Op.CREATE, table="items"),
                    make_event(1, Op.UPDATE, table="items"),
                    make_event(1, Op.DELETE, table="items"),
                    make_event(2, Op.UPDATE, table="orders_1"),
                ],
                commit_offsets={"src": 1},
            )
        ],
        table_names=SHARDS,
    )
    error = run(log, source, table_ops={"public.items": frozenset({"c", "d"})})
    assert error is None
    items = read(log, f"{PIPELINE}.public.items")
    assert [value["op"] if value else None for _, value in items] == ["c", "d", None]
    assert [v["op"] for _, v in read(log, f"{PIPELINE}.public.orders_1")] == ["u"]
    assert source.acked == [{"src": 1}]


def test_ops_filter_runs_before_the_transforms(log: EmbeddedLog) -> None:
    source = ScriptedSource(
        [SourceBatch(events=[shard_event("orders_1", 1, Op.TRUNCATE)], commit_offsets={"s": 1})],
        table_names=SHARDS,
    )
    ops = {"public.orders_1": frozenset({"c", "u", "d"})}
    assert run(log, source, chain(MERGE), table_ops=ops) is None  # no truncate reached route


# -- routing ---------------------------------------------------------------------------------


def test_route_writes_to_the_routed_topic_and_ensures_it(log: EmbeddedLog) -> None:
    source = ScriptedSource(
        [
            SourceBatch(
                events=[shard_event("orders_1", 1), shard_event("orders_2", 1)],
                commit_offsets={"src": 1},
            ),
            SourceBatch(events=[make_event(5, table="items")], commit_offsets={"src": 2}),
        ],
        table_names=SHARDS,
    )
    assert run(log, source, chain(MERGE)) is None
    topics = {info.name for info in log.topics()}
    assert {f"{PIPELINE}.public.orders", f"{PIPELINE}.public.items"} <= topics
    assert f"{PIPELINE}.public.orders_1" not in topics
    assert f"{PIPELINE}.public.orders_2" not in topics
    merged = read(log, f"{PIPELINE}.public.orders")
    assert [key for key, _ in merged] == [
        {"id": 1, DEBEZIUM_KEY_FIELD: "p.public.orders_1"},
        {"id": 1, DEBEZIUM_KEY_FIELD: "p.public.orders_2"},
    ]
    assert [value["source"]["table"] for _, value in merged] == ["orders_1", "orders_2"]
    assert len(read(log, f"{PIPELINE}.public.items")) == 1


def test_topics_are_ensured_for_routed_tables_before_any_event(log: EmbeddedLog) -> None:
    source = ScriptedSource([], table_names=SHARDS)
    assert run(log, source, chain(MERGE)) is None
    topics = {info.name for info in log.topics()}
    assert f"{PIPELINE}.public.orders" in topics
    assert f"{PIPELINE}.public.orders_1" not in topics
    assert {schema_topic(PIPELINE), dead_letter_topic(PIPELINE)} <= topics


# -- transform errors ------------------------------------------------------------------------


def merged_truncate_script() -> list[SourceBatch | BaseException]:
    return [
        SourceBatch(events=[shard_event("orders_1", 1)], commit_offsets={"src": 1}),
        SourceBatch(
            events=[
                shard_event("orders_2", 2, position=2),
                shard_event("orders_2", 0, Op.TRUNCATE, position=2),
                shard_event("orders_2", 3, position=2),
            ],
            commit_offsets={"src": 2},
        ),
    ]


def test_transform_error_under_fail_stops_with_a_clear_error(log: EmbeddedLog) -> None:
    source = ScriptedSource(merged_truncate_script(), table_names=SHARDS)
    error = run(log, source, chain(MERGE), bad_records="fail")
    assert isinstance(error, BadRecordStop)
    message = str(error)
    assert "transforms[0] (route) failed on a change of public.orders_2" in message
    assert "merges several tables" in message
    assert "bad_records: dead_letter" in message
    assert source.acked == [{"src": 1}]  # the failing batch was not committed
    assert log.source_offsets() == {"src": 1}
    assert len(read(log, f"{PIPELINE}.public.orders")) == 1
    assert read(log, dead_letter_topic(PIPELINE)) == []


def test_transform_error_under_dead_letter_writes_where_not_what(log: EmbeddedLog) -> None:
    source = ScriptedSource(merged_truncate_script(), table_names=SHARDS)
    assert run(log, source, chain(MERGE), bad_records="dead_letter") is None
    assert source.acked == [{"src": 1}, {"src": 2}]
    merged = read(log, f"{PIPELINE}.public.orders")
    assert [key["id"] for key, _ in merged] == [1, 2, 3]  # the others of the batch went on
    [(key, letter)] = read(log, dead_letter_topic(PIPELINE))
    assert letter["origin"] == "source"
    assert letter["table"] == "public.orders_2"
    assert letter["key"] == {}
    assert "transforms[0] (route)" in letter["reason"]
    assert letter["payload"] == {"op": "t", "position": 2, "sequence": 0}
    assert key["table"] == "public.orders_2"


def test_dead_letter_of_a_row_change_holds_no_row_values(log: EmbeddedLog) -> None:
    class Refuses:
        def apply(self, change: ChangeEvent) -> ChangeEvent:
            raise ValueError("cannot reshape this row")

    refuse = TransformChain([("transforms[0] (refuses)", TransformConfig(type="x"), Refuses())])
    source = ScriptedSource(
        [SourceBatch(events=[shard_event("items", 9, Op.UPDATE)], commit_offsets={"src": 1})],
        table_names=SHARDS,
    )
    assert run(log, source, refuse, bad_records="dead_letter") is None
    letters = [
        r.value for p in log.end_offsets(dead_letter_topic(PIPELINE))
        for r in log.read(dead_letter_topic(PIPELINE), p, 0, 10)
    ]  # fmt: skip
    assert len(letters) == 1
    assert letters[0] is not None and b"s3cret-value" not in letters[0]
    letter = orjson.loads(letters[0])
    assert letter["key"] == {"id": 9}
    assert letter["payload"] == {"op": "u", "position": 1, "sequence": 0}
    assert "cannot reshape this row" in letter["reason"]
    assert read(log, f"{PIPELINE}.public.items") == []


# -- published shapes ------------------------------------------------------------------------


def shape(table: str) -> TableSchema:
    columns = (Column("id", "bigint", key=True, nullable=False), Column("secret", "text"))
    return TableSchema("fake", "public", table, columns, position=1)


def schema_records(log: EmbeddedLog) -> list[tuple[Any, Any]]:
    return read(log, schema_topic(PIPELINE))


def test_schemas_are_published_transformed_beside_the_source_shape(log: EmbeddedLog) -> None:
    source = ScriptedSource(
        [
            SourceBatch(
                schemas=[shape("orders_1"), shape("items")],
                events=[shard_event("orders_1", 1), make_event(2, table="items")],
                commit_offsets={"src": 1},
            )
        ],
        table_names=SHARDS,
    )
    transforms = chain(MERGE, AddFieldConfig(match=r"public\.orders", field="region", value="eu"))
    assert run(log, source, transforms) is None
    published = {
        (tuple(sorted(key.items())), value.get("transformed", False))
        for key, value in schema_records(log)
    }
    assert published == {
        ((("schema", "public"), ("table", "orders")), True),
        ((("kind", "source_shape"), ("schema", "public"), ("table", "orders_1")), False),
        ((("schema", "public"), ("table", "items")), False),
    }

    sinks_view = SchemaCatalog(log, PIPELINE, wait_s=0)
    routed = sinks_view.get("public", "orders")
    assert routed is not None
    assert [c.name for c in routed.columns] == ["id", "secret", DEBEZIUM_KEY_FIELD, "region"]
    assert routed.key_columns == ["id", DEBEZIUM_KEY_FIELD]
    assert sinks_view.get("public", "orders_1") is None
    assert sinks_view.get("public", "items") == shape("items")

    sources_view = SchemaCatalog(log, PIPELINE, wait_s=0, source_shapes=True)
    assert sources_view.get("public", "orders_1") == shape("orders_1")
    assert sources_view.get("public", "orders") is None
    assert sources_view.get("public", "items") == shape("items")


def test_without_transforms_no_source_shape_is_written(log: EmbeddedLog) -> None:
    source = ScriptedSource(
        [SourceBatch(schemas=[shape("items")], commit_offsets={"src": 1})], table_names=SHARDS
    )
    assert run(log, source) is None
    [(key, value)] = schema_records(log)
    assert key == {"schema": "public", "table": "items"}
    assert "transformed" not in value


# -- the fingerprint -------------------------------------------------------------------------


def test_fingerprint_is_stored_with_the_first_commit(log: EmbeddedLog) -> None:
    stored = {"transforms": "abc", "tables": {"public.items": "def"}, "mask_key": None}
    source = ScriptedSource(
        [
            SourceBatch(events=[make_event(1, table="items")]),  # not committed yet
            SourceBatch(events=[make_event(2, table="items")], commit_offsets={"src": 1}),
            SourceBatch(events=[make_event(3, table="items")], commit_offsets={"src": 2}),
        ],
        table_names=SHARDS,
    )
    assert run(log, source, first_commit={OFFSET_KEY: stored}) is None
    assert log.source_offsets() == {"src": 2, OFFSET_KEY: stored}
    assert source.acked == [{"src": 1}, {"src": 2}]  # the source never sees the fingerprint


def test_fingerprint_is_not_stored_without_a_commit(log: EmbeddedLog) -> None:
    stored = {"transforms": "abc", "tables": {}, "mask_key": None}
    source = ScriptedSource([SourceBatch(events=[make_event(1, table="items")])])
    assert run(log, source, first_commit={OFFSET_KEY: stored}) is None
    assert log.source_offsets() == {}


def test_a_shape_a_transform_refuses_stops_the_pipeline(log: EmbeddedLog) -> None:
    source = ScriptedSource(
        [SourceBatch(schemas=[shape("items")], commit_offsets={"src": 1})], table_names=SHARDS
    )
    rename = chain(RenameFieldsConfig(fields={"secret": "id"}))
    error = run(log, source, rename, bad_records="dead_letter")
    assert isinstance(error, TransformShapeError)
    assert "transforms[0] (rename_fields) failed on the shape of public.items" in str(error)
    assert source.acked == []
    assert schema_records(log) == []
