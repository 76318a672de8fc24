"""The search sink on real Tantivy indexes: search, replace by key, guard, truncate, offsets."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.errors import RecordError, SinkFatal, SinkUnavailable
from cdc.contracts.events import Op, topic_name
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import Sink, SinkContext, SinkRecord
from cdc.log.base import TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.sink_task import SinkTask
from cdc.support.logging import get_logger
from cdc.testing import wait_until
from cdc.testing.conformance import SinkConformance
from sinks.search import SearchSink, SearchSinkConfig, SearchSinkPlugin
from tests.integration.keyed_records import (
    ITEMS,
    ITEMS_SCHEMA,
    ORDERS,
    Records,
    Schemas,
    TaskThread,
    apply,
    context,
    event,
    fill_log,
    item,
)

ITEMS_TOPIC = topic_name("shop", *ITEMS)


def config(path: Path) -> SearchSinkConfig:
    return SearchSinkConfig(name="search", type="search", path=str(path))


@pytest.fixture
def cfg(tmp_path: Path) -> SearchSinkConfig:
    return config(tmp_path / "search")


@pytest.fixture
def make(cfg: SearchSinkConfig) -> Iterator[Any]:
    opened: list[SearchSink] = []

    def build(ctx: SinkContext | None = None) -> SearchSink:
        for sink in opened:  # one writer per index: close the previous sink first
            sink.close()
        opened.clear()
        sink = SearchSink(cfg, ctx or context())
        sink.open()
        opened.append(sink)
        return sink

    yield build
    for sink in opened:
        sink.close()


def rows(cfg: SearchSinkConfig, table: tuple[str, str] = ITEMS) -> dict[str, Any]:
    found = SearchSinkPlugin.read_rows(cfg, *table)
    return {":".join(str(v) for v in key.values()): row for key, row in found}


def ids(found: list[dict[str, Any]]) -> set[int]:
    return {row["id"] for row in found}


class TestSearchConformance(SinkConformance):
    @pytest.fixture(autouse=True)
    def _store(self, tmp_path: Path) -> None:
        self.config = config(tmp_path / "kit-search")

    def make_sink(self, context: SinkContext) -> Sink:
        return SearchSink(self.config, context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        found = SearchSinkPlugin.read_rows(self.config, "public", "kit_items")
        return {row["id"]: row for _, row in found}


def test_search_finds_text_columns_and_fields(make: Any, cfg: SearchSinkConfig) -> None:
    records = Records()
    apply(
        make(),
        records(
            item(Op.CREATE, 1, 10, name="Red bicycle", body="fast and light", qty=3),
            item(Op.CREATE, 2, 11, name="Blue kettle", body="boils water fast", qty=5),
            item(Op.CREATE, 3, 12, name="Green lamp", body="warm light", qty=3),
        ),
    )
    search = SearchSinkPlugin.search
    assert ids(search(cfg, "public", "items", "bicycle", 10)) == {1}
    assert ids(search(cfg, "public", "items", "light", 10)) == {1, 3}
    assert ids(search(cfg, "public", "items", "fast AND water", 10)) == {2}
    assert ids(search(cfg, "public", "items", "row.qty:3", 10)) == {1, 3}
    assert ids(search(cfg, "public", "items", "row.name:kettle", 10)) == {2}
    assert len(search(cfg, "public", "items", "light", 1)) == 1


def test_every_column_is_stored_exactly(make: Any, cfg: SearchSinkConfig) -> None:
    row = {
        "name": "x",
        "price": "12345678901234567890.12",
        "at": "2024-02-29T23:59:59.123456+00:00",
        "tags": ["a", "b"],
        "doc": {"nested": [1, {"k": None}]},
        "big": 9_223_372_036_854_775_807,
        "ratio": 0.1,
        "flag": True,
        "none": None,
    }
    apply(make(), Records()(item(Op.CREATE, 7, 10, **row)))
    assert rows(cfg) == {"7": {"id": 7, **row}}


def test_an_update_replaces_the_document_by_key(make: Any, cfg: SearchSinkConfig) -> None:
    records = Records()
    sink = make()
    apply(sink, records(item(Op.CREATE, 1, 10, name="old words")))
    apply(sink, records(item(Op.UPDATE, 1, 11, name="new words")))
    search = SearchSinkPlugin.search
    assert search(cfg, "public", "items", "old", 10) == []
    assert search(cfg, "public", "items", "words", 10) == [{"id": 1, "name": "new words"}]
    assert list(SearchSinkPlugin.read_rows(cfg, "public", "items")) == [
        ({"id": 1}, {"id": 1, "name": "new words"})
    ]


def test_deletes_tombstones_and_composite_keys(make: Any, cfg: SearchSinkConfig) -> None:
    records = Records()
    sink = make()
    apply(sink, records(*(item(Op.CREATE, k, k, name=f"word{k}") for k in range(1, 5))))
    apply(sink, records(event(Op.CREATE, {"region": "eu", "no": 1}, 5, ORDERS, note="hi")))
    apply(sink, records(item(Op.DELETE, 1, 20)))
    assert set(rows(cfg)) == {"2", "3", "4"}
    assert SearchSinkPlugin.search(cfg, "public", "items", "word1", 10) == []
    apply(sink, [records.tombstone({"id": 2})])  # its delete was compacted away
    assert set(rows(cfg)) == {"3", "4"}
    apply(sink, Records()(item(Op.CREATE, 1, 1, name="word1")))  # older than the delete
    assert set(rows(cfg)) == {"3", "4"}
    assert rows(cfg, ORDERS) == {"eu:1": {"region": "eu", "no": 1, "note": "hi"}}


def test_late_delete_and_its_tombstone_do_not_delete_a_newer_row(
    make: Any, cfg: SearchSinkConfig
) -> None:
    records = Records()
    sink = make()
    apply(sink, records(item(Op.CREATE, 1, 30, name="new")))
    late = records(item(Op.DELETE, 1, 20))  # the delete and its tombstone, both late
    apply(sink, late[:1])
    apply(sink, late[1:])
    assert rows(cfg) == {"1": {"id": 1, "name": "new"}}


def test_truncate_deletes_older_rows_and_keeps_later_ones(make: Any, cfg: SearchSinkConfig) -> None:
    records = Records()
    sink = make()
    apply(sink, records(*(item(Op.CREATE, k, k, name="x") for k in range(1, 301))))
    apply(sink, records(event(Op.CREATE, {"region": "eu", "no": 1}, 400, ORDERS)))
    batch = records(
        item(Op.CREATE, 301, 500, name="before"),
        event(Op.TRUNCATE, {}, 501, ITEMS),
        item(Op.CREATE, 302, 502, name="after"),
    )
    apply(sink, batch)
    assert rows(cfg) == {"302": {"id": 302, "name": "after"}}
    apply(sink, batch)  # replayed: the truncate must not delete what came after it
    apply(sink, Records()(item(Op.CREATE, 5, 5, name="old")))
    reopened = make()  # the truncate position survives a restart
    apply(reopened, Records()(item(Op.CREATE, 6, 6, name="old")))
    assert rows(cfg) == {"302": {"id": 302, "name": "after"}}
    assert set(rows(cfg, ORDERS)) == {"eu:1"}


def test_replay_of_a_history_in_other_batches_is_idempotent(
    make: Any, cfg: SearchSinkConfig
) -> None:
    history = Records()(
        *(item(Op.CREATE, k, k, name=f"a{k}") for k in range(1, 30)),
        *(item(Op.UPDATE, k, 100 + k, name=f"b{k}") for k in range(1, 30, 3)),
        *(item(Op.DELETE, k, 200 + k) for k in range(2, 30, 4)),
        item(Op.CREATE, 2, 300, name="back"),
    )
    sink = make()
    apply(sink, history)
    expected = rows(cfg)
    for size in (1, 7, 50):
        for start in range(0, len(history), size):
            apply(sink, history[start : start + size])
        assert rows(cfg) == expected
    assert expected["2"] == {"id": 2, "name": "back"}
    assert "6" not in expected and expected["4"] == {"id": 4, "name": "b4"}


def test_older_change_in_the_same_batch_is_ignored(make: Any, cfg: SearchSinkConfig) -> None:
    records = Records()
    apply(make(), records(item(Op.CREATE, 1, 30, name="new"), item(Op.UPDATE, 1, 20, name="old")))
    assert rows(cfg) == {"1": {"id": 1, "name": "new"}}


def test_added_column_is_stored_and_searchable(make: Any, cfg: SearchSinkConfig) -> None:
    schemas = Schemas()
    records = Records()
    sink = make(context(schemas))
    apply(sink, records(item(Op.CREATE, 1, 10, name="first")))
    columns = (*ITEMS_SCHEMA.columns, Column("tagline", "text"))
    schemas.current[ITEMS] = TableSchema("test", *ITEMS, columns=columns, position=11)
    apply(sink, records(item(Op.CREATE, 2, 12, name="second", tagline="shiny gadget")))
    assert rows(cfg) == {
        "1": {"id": 1, "name": "first"},
        "2": {"id": 2, "name": "second", "tagline": "shiny gadget"},
    }
    assert ids(SearchSinkPlugin.search(cfg, "public", "items", "gadget", 10)) == {2}
    assert ids(SearchSinkPlugin.search(cfg, "public", "items", "row.tagline:shiny", 10)) == {2}


def test_only_text_columns_feed_the_default_field(make: Any, cfg: SearchSinkConfig) -> None:
    apply(make(), Records()(item(Op.CREATE, 1, 10, name="lamp", at="2024-01-01", price="42")))
    assert SearchSinkPlugin.search(cfg, "public", "items", "42", 10) == []
    assert ids(SearchSinkPlugin.search(cfg, "public", "items", "lamp", 10)) == {1}


def test_offsets_are_kept_with_the_commit(make: Any) -> None:
    records = Records()
    sink = make()
    assert sink.stored_offsets() == {}
    apply(sink, records(*(item(Op.CREATE, k, k) for k in range(5)), item(Op.DELETE, 1, 9)))
    assert make().stored_offsets() == {TopicPartition(ITEMS_TOPIC, 0): 7}


def test_crash_between_commit_and_offsets_replays_harmlessly(
    cfg: SearchSinkConfig, tmp_path: Path
) -> None:
    log = EmbeddedLog(tmp_path / "log")
    fill_log(log, [item(Op.CREATE, k, k, name=f"a{k}") for k in range(1, 101)])
    task = TaskThread(log, lambda: SearchSink(cfg, context()))
    task.wait_committed(100)
    task.close()
    offsets = Path(cfg.path) / f"_offsets.{cfg.name}.json"
    saved = offsets.read_bytes()
    history = [item(Op.UPDATE, k, 1000 + k, name=f"b{k}") for k in range(1, 101, 2)]
    history += [item(Op.DELETE, k, 2000 + k) for k in range(2, 101, 10)]
    history += [event(Op.TRUNCATE, {}, 2500, ORDERS), item(Op.CREATE, 2, 3000, name="again")]
    fill_log(log, history)
    task = TaskThread(log, lambda: SearchSink(cfg, context()))
    task.wait_committed(100 + len(history) + 10)  # ten deletes add ten tombstones
    task.close()
    expected = rows(cfg)
    offsets.write_bytes(saved)  # as if the process died after the commits, before the file
    task = TaskThread(log, lambda: SearchSink(cfg, context()))
    # Every items record after the saved offsets is read again (the orders truncate is not: that
    # partition has no offset in the saved file, so the group's committed one applies).

    def read_again() -> bool:
        assert task.error is None, task.error
        return task.task.records_applied >= len(history) + 9

    wait_until(read_again, 60)
    task.close()
    log.close()
    assert rows(cfg) == expected
    assert expected["2"] == {"id": 2, "name": "again"} and "12" not in expected
    assert expected["3"] == {"id": 3, "name": "b3"} and expected["4"] == {"id": 4, "name": "a4"}


def test_second_writer_on_the_same_index_is_retriable(make: Any, cfg: SearchSinkConfig) -> None:
    make()
    with pytest.raises(SinkUnavailable):
        SearchSink(cfg, context()).open()


def test_a_record_that_is_not_an_envelope_is_a_record_error(make: Any) -> None:
    bad = SinkRecord(ITEMS_TOPIC, 0, 0, {"id": 1}, {"op": "c", "after": {"id": 1}})
    with pytest.raises(RecordError) as caught:
        make().write([bad])
    assert caught.value.record is bad


def test_search_errors_are_clear(make: Any, cfg: SearchSinkConfig) -> None:
    with pytest.raises(SinkFatal, match="no index"):
        SearchSinkPlugin.search(cfg, "public", "missing", "x", 10)
    make()
    with pytest.raises(SinkFatal, match="invalid query"):
        SearchSinkPlugin.search(cfg, "public", "items", "row.qty:[1 TO", 10)


@pytest.mark.parametrize("where", ["under_a_file", "is_a_file"])
def test_a_directory_that_cannot_be_created_is_fatal(tmp_path: Path, where: str) -> None:
    # "blocks" in the path: a path naming a lock must not read as the index lock held.
    plain = tmp_path / "blocks"
    plain.write_text("not a directory")
    path = plain / "search" if where == "under_a_file" else plain
    sink = SearchSink(config(path), context())
    with pytest.raises(SinkFatal, match="cannot create the index directory"):
        sink.open()
    # Through the sink task: it stops at once with that error, where it used to retry forever.
    log = EmbeddedLog(tmp_path / "log")
    stop = threading.Event()
    task = SinkTask(
        "shop",
        "search",
        log,
        lambda: SearchSink(config(path), context()),
        [ITEMS_TOPIC],
        stop,
        get_logger(),
    )
    started = time.monotonic()
    with pytest.raises(SinkFatal, match=str(path)):
        task.run()
    assert time.monotonic() - started < 5
    log.close()
