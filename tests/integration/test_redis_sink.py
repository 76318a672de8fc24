"""The Redis sink against a real redis-server: layout, guard, truncate, TTL, offsets, outages."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
import structlog.testing

from cdc.contracts.errors import SinkFatal, SinkUnavailable
from cdc.contracts.events import Op, topic_name
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import Sink, SinkContext
from cdc.log.base import TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.testing import wait_until
from cdc.testing.conformance import SinkConformance
from sinks.redis import RedisSink, RedisSinkConfig, RedisSinkPlugin
from tests.integration.keyed_records import (
    ITEMS,
    ORDERS,
    PIPELINE,
    Records,
    Schemas,
    TaskThread,
    apply,
    context,
    event,
    fill_log,
    item,
)
from tests.services.ports import free_port

ITEMS_TOPIC = topic_name(PIPELINE, *ITEMS)


@pytest.fixture
def prefix() -> str:
    """A key prefix of its own per test: the server is shared by the session."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(redis_server: Any) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_server.url)
    yield c
    c.close()


def config(url: str, prefix: str | None, **extra: Any) -> RedisSinkConfig:
    return RedisSinkConfig(name="cache", type="redis", url=url, key_prefix=prefix, **extra)


@pytest.fixture
def make(redis_server: Any, prefix: str) -> Iterator[Any]:
    opened: list[RedisSink] = []

    def build(ctx: SinkContext | None = None, **extra: Any) -> RedisSink:
        sink = RedisSink(config(redis_server.url, prefix, **extra), ctx or context())
        sink.open()
        opened.append(sink)
        return sink

    yield build
    for sink in opened:
        sink.close()


def rows(redis_server: Any, prefix: str, table: tuple[str, str] = ITEMS) -> dict[Any, Any]:
    found = RedisSinkPlugin.read_rows(config(redis_server.url, prefix), *table)
    return {key["key"]: row for key, row in found}


def needs_restart(server: Any) -> None:
    if not server.supports_restart:
        pytest.skip("the Redis given by address cannot be stopped by a test")


@contextmanager
def persisted_outage(server: Any) -> Iterator[None]:
    """Redis down for a while, its data saved first: a cache run with persistence."""
    c = redis.Redis.from_url(server.url)
    c.save()
    c.close()
    server.stop()
    try:
        yield
    finally:
        server.start()


class TestRedisConformance(SinkConformance):
    @pytest.fixture(autouse=True)
    def _store(self, redis_server: Any, prefix: str) -> None:
        self.server = redis_server
        self.config = config(redis_server.url, prefix)

    def make_sink(self, context: SinkContext) -> Sink:
        return RedisSink(self.config, context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        found = RedisSinkPlugin.read_rows(self.config, "public", "kit_items")
        return {row["id"]: row for _, row in found}

    @contextmanager
    def outage(self) -> Iterator[None]:
        if not self.server.supports_restart:  # given by address: the kit's simulated outage
            with super().outage():
                yield
            return
        with persisted_outage(self.server):
            yield


def test_key_layout_and_value_are_the_contract(make: Any, client: redis.Redis, prefix: str) -> None:
    records = Records()
    sink = make()
    apply(sink, records(item(Op.CREATE, 42, 10, name="a", price="1.50", qty=3)))
    apply(sink, records(event(Op.CREATE, {"region": "eu", "no": 7}, 11, ORDERS, note="n")))
    value = client.get(f"{prefix}:public.items:42")
    assert value is not None
    assert orjson.loads(value) == {"id": 42, "name": "a", "price": "1.50", "qty": 3}
    # Key values in key-column order, joined by ':'.
    assert orjson.loads(client.get(f"{prefix}:public.orders:eu:7") or b"null")["note"] == "n"


def test_default_prefix_is_the_pipeline_name_and_is_found_back(
    redis_server: Any, client: redis.Redis
) -> None:
    name = f"s{uuid.uuid4().hex[:8]}"
    cfg = RedisSinkConfig(name=name, type="redis", url=redis_server.url)
    sink = RedisSink(cfg, context(sink=name))
    sink.open()
    apply(sink, Records()(item(Op.CREATE, 990001, 10, name="p")))
    sink.close()
    assert client.exists(f"{PIPELINE}:public.items:990001")
    # cdc verify passes only the config: the prefix is found from the sink's offsets hash.
    found = list(RedisSinkPlugin.read_rows(cfg, "public", "items"))
    assert ({"key": "990001"}, {"id": 990001, "name": "p"}) in found
    with_columns = RedisSinkPlugin.read_rows(cfg, "public", "items", key_columns=["id"])
    assert ({"id": 990001}, {"id": 990001, "name": "p"}) in list(with_columns)
    client.hset(f"other:__offsets:{name}", "t|0", 1)
    with pytest.raises(SinkFatal, match="several key prefixes"):
        list(RedisSinkPlugin.read_rows(cfg, "public", "items"))


def test_upserts_deletes_and_tombstones(make: Any, redis_server: Any, prefix: str) -> None:
    records = Records()
    sink = make()
    apply(sink, records(*(item(Op.CREATE, k, 10 + k, name=f"n{k}") for k in range(1, 5))))
    apply(sink, records(item(Op.UPDATE, 1, 20, name="x"), item(Op.DELETE, 2, 21)))
    assert rows(redis_server, prefix) == {
        "1": {"id": 1, "name": "x"},
        "3": {"id": 3, "name": "n3"},
        "4": {"id": 4, "name": "n4"},
    }
    # A lone tombstone (compaction dropped its delete) deletes a row it comes after.
    apply(sink, [records.tombstone({"id": 3})])
    assert set(rows(redis_server, prefix)) == {"1", "4"}
    # An older create replayed after the delete does not bring the row back.
    apply(sink, Records()(item(Op.CREATE, 2, 12, name="n2")))
    assert set(rows(redis_server, prefix)) == {"1", "4"}


def test_replay_of_a_history_in_other_batches_is_idempotent(
    make: Any, redis_server: Any, prefix: str
) -> None:
    history = Records()(
        *(item(Op.CREATE, k, k, name=f"a{k}") for k in range(1, 30)),
        *(item(Op.UPDATE, k, 100 + k, name=f"b{k}") for k in range(1, 30, 3)),
        *(item(Op.DELETE, k, 200 + k) for k in range(2, 30, 4)),
        item(Op.CREATE, 2, 300, name="back"),
    )
    sink = make()
    apply(sink, history)
    expected = rows(redis_server, prefix)
    for size in (1, 7, 50):
        for start in range(0, len(history), size):
            apply(sink, history[start : start + size])
        assert rows(redis_server, prefix) == expected
    assert expected["2"] == {"id": 2, "name": "back"}
    assert "6" not in expected and expected["4"] == {"id": 4, "name": "b4"}


def test_older_change_after_newer_is_ignored_in_one_batch(
    make: Any, redis_server: Any, prefix: str
) -> None:
    records = Records()
    apply(
        make(),
        records(item(Op.CREATE, 1, 30, name="new"), item(Op.UPDATE, 1, 20, name="old")),
    )
    assert rows(redis_server, prefix) == {"1": {"id": 1, "name": "new"}}


def test_truncate_deletes_the_table_only_and_keeps_later_rows(
    make: Any, client: redis.Redis, redis_server: Any, prefix: str
) -> None:
    records = Records()
    sink = make()
    apply(sink, records(*(item(Op.CREATE, k, k, name="x") for k in range(1, 701))))
    apply(sink, records(event(Op.CREATE, {"region": "eu", "no": 1}, 800, ORDERS)))
    batch = records(
        item(Op.CREATE, 701, 900, name="before"),
        event(Op.TRUNCATE, {}, 901, ITEMS),
        item(Op.CREATE, 702, 902, name="after"),
    )
    apply(sink, batch)
    assert rows(redis_server, prefix) == {"702": {"id": 702, "name": "after"}}
    assert set(rows(redis_server, prefix, ORDERS)) == {"eu:1"}
    apply(sink, batch)  # a replay of the truncate must not delete what came after it
    apply(sink, Records()(item(Op.CREATE, 5, 5, name="old")))  # older than the truncate
    assert rows(redis_server, prefix) == {"702": {"id": 702, "name": "after"}}
    # The positions of the truncated rows went with them.
    assert client.hlen(f"{prefix}:__pos:public.items") == 1


def test_ttl_applies_to_rows_and_expired_rows_stay_guarded(
    make: Any, client: redis.Redis, redis_server: Any, prefix: str
) -> None:
    sink = make(ttl_s=1)
    apply(sink, Records()(item(Op.CREATE, 1, 10, name="a")))
    assert 0 < client.pttl(f"{prefix}:public.items:1") <= 1000
    # Gone once its TTL (at most 1 s, asserted above) has run out: polled for, within the
    # 1.2 s the test used to sleep.
    wait_until(lambda: not rows(redis_server, prefix), 1.2, 0.02, describe="the row to expire")
    apply(sink, Records()(item(Op.CREATE, 1, 9, name="older")))
    assert rows(redis_server, prefix) == {}


def test_offsets_are_stored_with_the_data(make: Any, redis_server: Any, prefix: str) -> None:
    records = Records()
    sink = make()
    assert sink.stored_offsets() == {}
    apply(sink, records(*(item(Op.CREATE, k, k) for k in range(5)), item(Op.DELETE, 1, 9)))
    again = make()
    assert again.stored_offsets() == {TopicPartition(ITEMS_TOPIC, 0): 7}


def test_a_lost_script_cache_is_reloaded(
    make: Any, client: redis.Redis, redis_server: Any, prefix: str
) -> None:
    sink = make()
    client.script_flush()
    apply(sink, Records()(item(Op.CREATE, 1, 10, name="a")))
    assert rows(redis_server, prefix) == {"1": {"id": 1, "name": "a"}}


def test_unreachable_at_open_is_a_clear_retriable_error() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    sink = RedisSink(config(url, "x", timeout_s=0.5), context())
    with pytest.raises(SinkUnavailable) as caught:
        sink.open()
    assert "hunter2" not in str(caught.value)
    assert ":***@127.0.0.1" in str(caught.value)


def test_redis_down_mid_run_backpressure_then_no_loss(
    redis_server: Any, prefix: str, tmp_path: Path
) -> None:
    needs_restart(redis_server)
    log = EmbeddedLog(tmp_path / "log")
    fill_log(log, [item(Op.CREATE, k, k, name=f"a{k}") for k in range(1, 201)])
    cfg = config(redis_server.url, prefix, timeout_s=0.5)
    task = TaskThread(log, lambda: RedisSink(cfg, context()))
    try:
        task.wait_committed(200)
        with persisted_outage(redis_server), structlog.testing.capture_logs() as logs:
            fill_log(log, [item(Op.UPDATE, k, 1000 + k, name=f"b{k}") for k in range(1, 201)])
            refused = lambda: sum(e["event"] == "sink.retrying" for e in logs)  # noqa: E731
            wait_until(lambda: refused() >= 2, 60, describe="two refused writes")
            assert task.committed() == 200  # backpressure: nothing more taken while down
            assert task.error is None
        task.wait_committed(400)
    finally:
        task.close()
        log.close()
    assert rows(redis_server, prefix) == {str(k): {"id": k, "name": f"b{k}"} for k in range(1, 201)}


def test_redis_that_lost_its_data_is_rebuilt_from_the_log(
    redis_server: Any, prefix: str, tmp_path: Path
) -> None:
    needs_restart(redis_server)
    log = EmbeddedLog(tmp_path / "log")
    fill_log(log, [item(Op.CREATE, k, k, name=f"a{k}") for k in range(1, 101)])
    cfg = config(redis_server.url, prefix, timeout_s=0.5)
    task = TaskThread(log, lambda: RedisSink(cfg, context()))
    try:
        task.wait_committed(100)
        redis_server.stop()  # no save: the restarted server is empty
        redis_server.start()
        fill_log(log, [item(Op.CREATE, 101, 101, name="a101")])
        error = task.wait_stopped()
    finally:
        task.close()
    assert isinstance(error, SinkFatal) and "lost" in str(error)
    again = TaskThread(log, lambda: RedisSink(cfg, context()))
    try:
        again.wait_committed(101)
    finally:
        again.close()
        log.close()
    assert rows(redis_server, prefix) == {str(k): {"id": k, "name": f"a{k}"} for k in range(1, 102)}


def test_an_any_type_key_keeps_the_number_and_the_string_of_one_text_apart(
    make: Any, redis_server: Any, client: redis.Redis, prefix: str
) -> None:
    # A MongoDB collection may hold the _id 5 and the _id "5": two documents, two rows. Its
    # schema gives _id no type; the sink learns that from the pipeline's schemas.
    docs = ("shop", "docs")
    schemas = Schemas()
    schemas.current[docs] = TableSchema(
        "mongodb", "shop", "docs", (Column("_id", "", key=True), Column("v", ""))
    )
    records = Records()
    sink = make(context(schemas))
    ids: list[Any] = [5, "5", "abc", True, "true", {"$oid": "65a1b2c3d4e5f6a7b8c9d0e1"}]
    apply(
        sink, records(*(event(Op.CREATE, {"_id": i}, 10 + n, docs, v=n) for n, i in enumerate(ids)))
    )
    held = {orjson.dumps(r["_id"]): r["v"] for _, r in rows_of(redis_server, prefix, docs)}
    assert held == {orjson.dumps(i): n for n, i in enumerate(ids)}
    assert client.get(f"{prefix}:shop.docs:abc") is not None  # a plain string: as it is
    assert client.get(f'{prefix}:shop.docs:"5"') is not None
    # A delete of the string leaves the number, and the other way round.
    apply(sink, records(event(Op.DELETE, {"_id": "5"}, 30, docs)))
    apply(sink, records(event(Op.DELETE, {"_id": True}, 31, docs)))
    held = {orjson.dumps(r["_id"]): r["v"] for _, r in rows_of(redis_server, prefix, docs)}
    assert held == {orjson.dumps(i): n for n, i in enumerate(ids) if i not in ("5", True)}
    assert RedisSinkPlugin.read_key(
        config(redis_server.url, prefix), "shop", "docs", {"_id": 5}, any_type=True
    ) == ({"_id": 5, "v": 0}, (10, 0))
    assert RedisSinkPlugin.read_key(
        config(redis_server.url, prefix), "shop", "docs", {"_id": "5"}, any_type=True
    ) == (None, (30, 0))


def rows_of(redis_server: Any, prefix: str, table: tuple[str, str]) -> list[tuple[Any, Any]]:
    return list(RedisSinkPlugin.read_rows(config(redis_server.url, prefix), *table))
