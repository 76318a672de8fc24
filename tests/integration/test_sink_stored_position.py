"""The consistent source position a sink stores beside its offsets
(:class:`cdc.contracts.sink.PositionedSink`), against real DuckDB, PostgreSQL and Redis, and the
search sink's (Tantivy) and JSONL sink's files.

One body for the five: a position handed with a batch is stored by its flush and read back
by the plugin's ``read_consistent_position`` (what ``cdc status`` reads); handed alone it is
stored only once the store holds offsets; a flush forgets what it was handed; a table reset
forgets the stored one, since the data no longer holds it.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdc.contracts.events import Op, topic_name
from cdc.contracts.sink import PositionedSink, SinkRecord
from cdc.log.base import TopicPartition
from sinks.duckdb import DuckDBSinkConfig
from sinks.duckdb.plugin import DuckDBSinkPlugin
from sinks.jsonl.config import JsonlSinkConfig
from sinks.jsonl.plugin import JsonlSinkPlugin
from sinks.jsonl.sink import STATE_FILE, JsonlSink
from sinks.postgres.plugin import PostgresSinkPlugin
from sinks.redis import RedisSink, RedisSinkConfig
from sinks.redis.plugin import RedisSinkPlugin
from sinks.search.config import SearchSinkConfig
from sinks.search.plugin import SearchSinkPlugin
from sinks.search.sink import SearchSink
from tests.integration import duckdb_kit, keyed_records, postgres_sink_kit


@dataclass
class Store:
    """A sink under test, how to make its records, and how to read its stored position."""

    sink: PositionedSink
    records: Callable[[int, int], list[SinkRecord]]  # (key, source position) -> records
    stored: Callable[[], str | None]
    topic: str


def _duckdb(tmp_path: Path) -> Iterator[Store]:
    harness = duckdb_kit.Harness(tmp_path / "wh.duckdb")
    config = DuckDBSinkConfig(name="wh", type="duckdb", path=str(harness.path))
    yield Store(
        harness.sink,
        lambda key, pos: harness.records(duckdb_kit.item(Op.CREATE, key, pos, "n", 1)),
        lambda: DuckDBSinkPlugin.read_consistent_position(config, pipeline=duckdb_kit.PIPELINE),
        duckdb_kit.TOPIC,
    )
    harness.sink.close()


def _postgres(dsn: str) -> Iterator[Store]:
    harness = postgres_sink_kit.Harness(dsn, sink=f"s{uuid.uuid4().hex[:8]}")
    yield Store(
        harness.sink,
        lambda key, pos: harness.records(duckdb_kit.item(Op.CREATE, key, pos, "n", 1)),
        lambda: PostgresSinkPlugin.read_consistent_position(
            harness.config, pipeline=duckdb_kit.PIPELINE
        ),
        duckdb_kit.TOPIC,
    )
    harness.close()


def _redis(url: str) -> Iterator[Store]:
    config = RedisSinkConfig(
        name="cache", type="redis", url=url, key_prefix=f"t{uuid.uuid4().hex[:10]}"
    )
    sink = RedisSink(config, keyed_records.context(sink="cache"))
    sink.open()
    records = keyed_records.Records()
    yield Store(
        sink,
        lambda key, pos: records(keyed_records.item(Op.CREATE, key, pos, name="n")),
        lambda: RedisSinkPlugin.read_consistent_position(config, pipeline=keyed_records.PIPELINE),
        topic_name(keyed_records.PIPELINE, *keyed_records.ITEMS),
    )
    sink.close()


def _files(kind: str, tmp_path: Path) -> Iterator[Store]:
    """The search sink (an offsets file beside its indexes) or the JSONL sink (a state file)."""
    context = keyed_records.context(sink=kind)
    sink: JsonlSink | SearchSink
    if kind == "search":
        search = SearchSinkConfig(name=kind, path=str(tmp_path / kind))
        sink = SearchSink(search, context)
        stored = functools.partial(SearchSinkPlugin.read_consistent_position, search, pipeline="")
    else:
        jsonl = JsonlSinkConfig(name=kind, type="jsonl", path=str(tmp_path / kind))
        sink = JsonlSink(jsonl, context)
        stored = functools.partial(JsonlSinkPlugin.read_consistent_position, jsonl, pipeline="")
    sink.open()
    records = keyed_records.Records()
    yield Store(
        sink,
        lambda key, pos: records(keyed_records.item(Op.CREATE, key, pos, name="n")),
        stored,
        topic_name(keyed_records.PIPELINE, *keyed_records.ITEMS),
    )
    sink.close()


@pytest.fixture(params=["duckdb", "postgres", "redis", "search", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "duckdb":
        yield from _duckdb(tmp_path)
    elif request.param in ("search", "jsonl"):
        yield from _files(request.param, tmp_path)
    elif request.param == "postgres":
        yield from _postgres(request.getfixturevalue("pg_db"))
    else:
        yield from _redis(request.getfixturevalue("redis_server").url)


def _apply(store: Store, records: list[SinkRecord], position: str | None = None) -> None:
    if position is not None:
        store.sink.set_consistent_position(position)
    store.sink.write(records)
    store.sink.flush()


def test_the_position_is_stored_with_the_offsets_and_read_back(store: Store) -> None:
    store.sink.set_consistent_position("0/10")
    store.sink.flush()  # alone, before the store holds any offsets: nothing to stand beside
    assert store.stored() is None
    _apply(store, store.records(1, 100), "0/16B3748")
    assert store.stored() == "0/16B3748"
    _apply(store, store.records(2, 101))  # a batch handed no position keeps the stored one
    assert store.stored() == "0/16B3748"
    store.sink.set_consistent_position("0/1D4C7F8")
    store.sink.flush()  # idle: the position alone, the offsets as they are
    assert store.stored() == "0/1D4C7F8"
    store.sink.close()
    store.sink.open()  # the offsets read back: the position is no partition's
    assert dict(store.sink.stored_offsets() or {}) == {TopicPartition(store.topic, 0): 2}
    store.sink.flush()  # a flush stores what it was handed once
    assert store.stored() == "0/1D4C7F8"


def test_a_table_reset_forgets_the_stored_position(store: Store) -> None:
    _apply(store, store.records(1, 100), "0/16B3748")
    assert store.stored() == "0/16B3748"
    store.sink.reset_table(("public", "items"), [TopicPartition(store.topic, 0)])
    assert store.stored() is None
    assert dict(store.sink.stored_offsets() or {})[TopicPartition(store.topic, 0)] == 0


def test_a_failed_jsonl_flush_forgets_the_position_it_was_handed(tmp_path: Path) -> None:
    """The state file cannot be replaced (its temporary name is taken by a directory): the
    flush fails, and the position handed for it is not stored by the next flush that succeeds,
    whose records may not reach it."""
    jsonl = JsonlSinkConfig(name="j", type="jsonl", path=str(tmp_path / "j"))
    sink = JsonlSink(jsonl, keyed_records.context(sink="j"))
    stored = functools.partial(JsonlSinkPlugin.read_consistent_position, jsonl, pipeline="")
    records = keyed_records.Records()
    sink.open()
    try:
        sink.write(records(keyed_records.item(Op.CREATE, 1, 10, name="n")))
        sink.set_consistent_position("0/10")
        sink.flush()
        assert stored() == "0/10"
        blocker = tmp_path / "j" / (STATE_FILE + ".tmp")
        blocker.mkdir()
        sink.write(records(keyed_records.item(Op.CREATE, 2, 20, name="n")))
        sink.set_consistent_position("0/20")
        with pytest.raises(OSError):
            sink.flush()
        blocker.rmdir()
        sink.flush()
        assert stored() == "0/10"
    finally:
        sink.close()
