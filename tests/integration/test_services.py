"""The service fixtures really serve: each test talks to the real server it asked for."""

from __future__ import annotations

import shutil
import time
import uuid
from typing import Any

import psycopg
import pymongo
import pytest
import redis
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from psycopg.pq import ExecStatus

from tests.services.common import in_ci
from tests.services.redis import LocalRedis


def _needs_restart(server: Any) -> None:
    if not server.supports_restart:
        pytest.skip("server given by address (environment variable): cannot restart it")


def test_postgres_is_logical_and_accepts_replication(pg_db: str) -> None:
    with psycopg.connect(pg_db) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
    with psycopg.connect(pg_db, replication="database", autocommit=True) as repl:
        result = repl.pgconn.exec_(b"IDENTIFY_SYSTEM")
        assert result.status == ExecStatus.TUPLES_OK, result.error_message
        assert result.get_value(0, 3) == pg_db.rsplit("/", 1)[1].encode()


def test_pg_db_drops_its_slots(pg_server: Any) -> None:
    name = pg_server.create_database("test_slot_cleanup")
    try:
        with psycopg.connect(pg_server.dsn_for(dbname=name), autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot('leak', 'pgoutput')")
    finally:
        pg_server.drop_database(name)
    with psycopg.connect(pg_server.dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE database = %s", (name,)
        ).fetchone()
    assert row == (0,)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restart_keeps_committed_rows(pg_server: Any, pg_db: str, mode: str) -> None:
    _needs_restart(pg_server)
    with psycopg.connect(pg_db) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1), (2)")
    pg_server.stop(mode=mode)
    pg_server.start()
    with psycopg.connect(pg_db) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_redis_set_get_and_restart(redis_server: Any) -> None:
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.set("cdc:test", "1")
        assert client.get("cdc:test") == b"1"
        _needs_restart(redis_server)
        redis_server.restart()
        assert client.ping()
    finally:
        client.close()


def test_redis_appendonly_survives_kill() -> None:
    if shutil.which("redis-server") is None and not in_ci():
        pytest.skip("redis-server not installed")
    with LocalRedis(appendonly=True) as server:
        client = redis.Redis.from_url(server.url)
        client.set("durable", "yes")
        server.kill()
        server.start()
        assert client.get("durable") == b"yes"
        client.close()


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(topic, key=b"k", value=value)
    assert producer.flush(30) == 0


def _consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            value = message.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact"}
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, config=config)])
    futures[topic].result(timeout=30)


def test_kafka_produce_consume(kafka_server: Any) -> None:
    topic = f"test.{uuid.uuid4().hex[:8]}"
    _create_topic(kafka_server.bootstrap_servers, topic)
    _produce(kafka_server.bootstrap_servers, topic, [b"a", b"b"])
    assert _consume(kafka_server.bootstrap_servers, topic, 2) == [b"a", b"b"]


def test_kafka_restart_keeps_records(kafka_server: Any) -> None:
    _needs_restart(kafka_server)
    topic = f"test.{uuid.uuid4().hex[:8]}"
    _create_topic(kafka_server.bootstrap_servers, topic)
    _produce(kafka_server.bootstrap_servers, topic, [b"before"])
    kafka_server.restart()
    _produce(kafka_server.bootstrap_servers, topic, [b"after"])
    assert _consume(kafka_server.bootstrap_servers, topic, 2) == [b"before", b"after"]


def test_kafka_transactions_work(kafka_server: Any) -> None:
    topic = f"test.{uuid.uuid4().hex[:8]}"
    _create_topic(kafka_server.bootstrap_servers, topic)
    producer = Producer(
        {"bootstrap.servers": kafka_server.bootstrap_servers, "transactional.id": topic}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"tx")
    producer.commit_transaction(30)
    assert _consume(kafka_server.bootstrap_servers, topic, 1) == [b"tx"]


def test_mongo_insert_find_and_change_stream(mongo_server: Any) -> None:
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(mongo_server.uri)
    try:
        collection = client[f"test_{uuid.uuid4().hex[:8]}"]["orders"]
        collection.insert_one({"_id": 1, "total": 10})
        assert collection.find_one({"_id": 1}) == {"_id": 1, "total": 10}
        with collection.watch(max_await_time_ms=500) as stream:
            collection.insert_one({"_id": 2, "total": 20})
            insert = _next_change(stream)
            collection.update_one({"_id": 2}, {"$set": {"total": 21}})
            update = _next_change(stream)
            collection.replace_one({"_id": 2}, {"total": 22})
            replace = _next_change(stream)
        assert insert["operationType"] == "insert"
        assert insert["documentKey"] == {"_id": 2}
        assert insert["fullDocument"] == {"_id": 2, "total": 20}
        assert insert["ns"] == {"db": collection.database.name, "coll": "orders"}
        assert update["operationType"] == "update"
        assert update["documentKey"] == {"_id": 2}
        assert update["updateDescription"]["updatedFields"] == {"total": 21}
        assert replace["operationType"] == "replace"
        assert replace["fullDocument"] == {"_id": 2, "total": 22}
    finally:
        client.close()


def _next_change(stream: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        change = stream.try_next()
        if change is not None:
            return dict(change)
    raise AssertionError("no change event within 30 s")
