"""A real Debezium consumer reads our topics: Debezium's JDBC sink applies them to PostgreSQL.

A Kafka Connect standalone worker (``tests/services/connect.py``, jars by ``make jars``) runs
Debezium's JDBC sink connector with the JsonConverter and ``schemas.enable=true``, as a Debezium
user does: upserts by the record key, deletes, tables created from the records' Connect schemas.
It writes into a second database on the test server, and the target table must then equal the
source table row by row, every value compared as PostgreSQL returns it.

- The harness test feeds the sink the records the real Debezium 3.6.1 engine wrote for the same
  table and changes (``tests/services/debezium.py``): it shows the sink, the comparison and the
  workload are sound, whatever our records are.
- The pipeline test runs ``cdc run --role source`` (PostgreSQL to the Kafka log) with Debezium's
  default converter options (``DEBEZIUM_DEFAULTS``, Connect schemas on) and lets the same sink
  apply our topic.

The table has a composite key and the common types; the workload has snapshot rows, inserts,
updates (to and from NULL), a delete, a re-insert of a deleted key and a primary-key update
(a delete, a tombstone and a create). Plain ``numeric`` (Debezium's VariableScaleDecimal) is left
out: the JDBC sink creates a ``double precision`` column for it, so even Debezium's own records
do not keep its value. Nor are the readable options tested: with them the sink gets strings for
decimals, dates, times and bytes, and creates ``text`` columns holding ``'1234567890.12'``,
``'2024-02-29Z'`` or base64 (so it does with Debezium's own readable records).

One worker serves the whole module (its JVM takes a while to start); each test adds its own sink
and removes it.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from cdc.envelope.options import DEBEZIUM_DEFAULTS
from cdc.testing import WaitTimeout, wait_until
from tests.e2e.cli_helpers import cdc, start_run, stop
from tests.services.common import ServiceError, ServiceUnavailableError, in_ci
from tests.services.connect import ConnectWorker, jdbc_sink_config
from tests.services.debezium import run_debezium

TABLE = "items"
KEY = ("id", "region")

DDL = """
CREATE TABLE items (
    id int NOT NULL, region varchar(8) NOT NULL,
    c_int int, c_bigint bigint, c_numeric numeric(12,2),
    c_text text, c_varchar varchar(20), c_bool bool,
    c_date date, c_timestamp timestamp, c_timestamptz timestamptz,
    c_bytea bytea, c_uuid uuid, c_json json,
    PRIMARY KEY (id, region)
)
"""

SNAPSHOT = [
    """INSERT INTO items VALUES (1, 'eu', 2147483647, 9223372036854775807, 1234567890.12,
        E'hello "world"\\n\\ttab', 'vc', true, '2024-02-29', '2024-02-29 13:45:30.123456',
        '2024-02-29 13:45:30.5+02', '\\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
        '{"a": [1, 2.50, null], "b": {"c": "é"}}')""",
    """INSERT INTO items VALUES (2, 'us', -2147483648, -9223372036854775808, -0.01,
        '', '', false, '1969-12-31', '1969-12-31 23:59:59.999999',
        '1969-12-31 23:59:59.999999-07', '\\x', '00000000-0000-0000-0000-000000000000', '[]')""",
    "INSERT INTO items (id, region) VALUES (3, 'ap')",
    """INSERT INTO items VALUES (4, 'mid', 0, 0, 0, 'unicode é 😀', 'x', NULL, '2000-01-01',
        '2000-01-01 00:00:00', '2000-01-01 00:00:00+00', '\\x0102030405060708090a0b0c0d0e0f10',
        'ffffffff-ffff-ffff-ffff-ffffffffffff', '{}')""",
]

#: Streamed changes, one transaction each, and the records Debezium writes for each.
STREAM: list[tuple[str, int]] = [
    (
        """INSERT INTO items VALUES (5, 'eu', 5, 5000000000, 99.99, 'five', 'v5', true,
            '2030-06-15', '2030-06-15 08:00:00.000001', '2030-06-15 08:00:00.000001-03:30',
            '\\xcafe', 'c0ffee00-0000-4000-8000-000000000005', '{"n": 5}'),
            (6, 'eu', 6, 6, 6.06, 'six', 'v6', false, '1999-01-01', '1999-01-01 00:00:00',
            '1999-01-01 00:00:00+00', '\\x06', 'c0ffee00-0000-4000-8000-000000000006', 'null')""",
        2,
    ),
    (
        """UPDATE items SET c_int = 42, c_numeric = 0.10, c_text = 'updated',
            c_bytea = '\\xdeadbeef', c_json = '{"k": 1}', c_date = '2024-01-31',
            c_timestamp = '2024-01-31 23:59:59.5', c_timestamptz = '2024-01-31 23:59:59.5+05',
            c_uuid = '3f333df6-90a4-4fda-8dd3-9485d27cee36', c_bool = true WHERE id = 3""",
        1,
    ),
    ("UPDATE items SET c_text = NULL, c_bool = NULL, c_json = NULL WHERE id = 1", 1),
    ("UPDATE items SET region = 'apac' WHERE id = 3 AND region = 'ap'", 3),
    ("DELETE FROM items WHERE id = 2", 2),
    ("INSERT INTO items (id, region, c_text) VALUES (2, 'us', 'back')", 1),
    ("UPDATE items SET c_bigint = c_bigint - 1, c_varchar = 'changed' WHERE id = 6", 1),
    ("DELETE FROM items WHERE id = 5", 2),
]


@pytest.fixture(scope="module")
def connect_worker(kafka_server: Any) -> Iterator[ConnectWorker]:
    """One Kafka Connect standalone worker with Debezium's JDBC sink, on the test broker."""
    try:
        worker = ConnectWorker(kafka_server.bootstrap_servers)
    except ServiceUnavailableError as exc:
        if in_ci():
            pytest.fail(f"service missing in CI: {exc}", pytrace=False)
        pytest.skip(str(exc))
    try:
        worker.start()
        yield worker
    finally:
        worker.close()


@pytest.fixture
def target_db(pg_server: Any) -> Iterator[str]:
    """The sink's database, on the test server beside the source's: yields its DSN."""
    name = f"target_{uuid.uuid4().hex[:12]}"
    pg_server.create_database(name)
    try:
        yield pg_server.dsn_for(dbname=name)
    finally:
        pg_server.drop_database(name)


def execute(dsn: str, statements: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def table_rows(dsn: str) -> list[dict[str, Any]] | None:
    """The table's rows by key, each a dict of column to value as psycopg reads it; None if the
    table does not exist (yet)."""
    query = sql.SQL("SELECT * FROM {} ORDER BY {}").format(
        sql.Identifier(TABLE), sql.SQL(", ").join(map(sql.Identifier, KEY))
    )
    with psycopg.connect(dsn) as conn:
        try:
            cursor = conn.execute(query)
        except psycopg.errors.UndefinedTable:
            return None
        names = [column.name for column in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def await_rows(
    worker: ConnectWorker, sink: str, target: str, want: list[dict[str, Any]], timeout_s: float
) -> None:
    """Waits until the target table equals ``want``; fails with both sides when it never does.

    Raises:
        ServiceError: The sink failed (its stack trace is in the message).
    """
    read: list[list[dict[str, Any]] | None] = []

    def same() -> bool:
        read[:] = [table_rows(target)]
        if read[0] == want:
            return True
        worker.check_healthy(sink)
        return False

    with contextlib.suppress(WaitTimeout):  # the checks below say how the table differs
        wait_until(same, timeout_s, 0.5)
    got = read[0]
    assert got is not None, f"the sink never created {TABLE}:\n{worker.log_tail(40)}"
    ours, theirs = by_key(got), by_key(want)
    extra, missing = sorted(ours.keys() - theirs.keys()), sorted(theirs.keys() - ours.keys())
    assert not extra and not missing, f"target keys: {extra} extra, {missing} missing"
    assert columns(got) == columns(want), "the target's columns are not the source's"
    for key, row in theirs.items():
        assert ours[key] == row, f"row {key}: target {ours[key]} != source {row}"


def columns(rows: list[dict[str, Any]]) -> set[str]:
    return {column for row in rows for column in row}


def by_key(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(row[column] for column in KEY): row for row in rows}


def add_sink(worker: ConnectWorker, target: str, topic: str) -> str:
    name = f"jdbc-{uuid.uuid4().hex[:8]}"
    worker.add_sink(name, jdbc_sink_config(target, topics_regex=re.escape(topic)))
    worker.wait_running(name, timeout_s=60)
    return name


def debezium_records(source: str, tmp_path: Path) -> list[dict[str, Any]]:
    """The records the real Debezium engine writes for SNAPSHOT and STREAM (Connect schemas)."""
    dbname = str(conninfo_to_dict(source)["dbname"])
    props = {
        "slot.name": f"dbz_{dbname}",
        "publication.name": f"dbz_{dbname}",
        "table.include.list": f"public.{TABLE}",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
    }
    expect = len(SNAPSHOT) + sum(count for _, count in STREAM)
    return run_debezium(
        source,
        props,
        expect=expect,
        timeout_s=240,
        workdir=tmp_path,
        during=lambda: execute(source, [statement for statement, _ in STREAM]),
        ready=len(SNAPSHOT),
    )


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    """Writes the records into ``topic``, key and value as the JsonConverter wrote them."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for record in records:
        value = record["value"]
        producer.produce(
            topic,
            key=json.dumps(record["key"]).encode(),
            value=None if value is None else json.dumps(value).encode(),
        )
    assert producer.flush(30) == 0, "records left unsent"


def test_harness_jdbc_sink_applies_the_real_debeziums_records(
    pg_db: str, target_db: str, kafka_server: Any, connect_worker: ConnectWorker, tmp_path: Path
) -> None:
    """The reference: Debezium's own records through its JDBC sink give the source's table."""
    execute(pg_db, [DDL, *SNAPSHOT])
    records = debezium_records(pg_db, tmp_path)
    assert [r["topic"] for r in records] == [f"dbz.public.{TABLE}"] * len(records)
    topic = f"h{uuid.uuid4().hex[:8]}.public.{TABLE}"
    produce(kafka_server.bootstrap_servers, topic, records)
    sink = add_sink(connect_worker, target_db, topic)
    try:
        source_rows = table_rows(pg_db)
        assert source_rows is not None and len(source_rows) == 5
        await_rows(connect_worker, sink, target_db, source_rows, timeout_s=90)
    finally:
        connect_worker.remove_sink(sink)


def write_pipeline(tmp_path: Path, name: str, bootstrap: str) -> Path:
    envelope = "".join(
        f"  {key}: {json.dumps(value)}\n" for key, value in DEBEZIUM_DEFAULTS.properties().items()
    )
    pipeline = tmp_path / "jdbc.yaml"
    pipeline.write_text(
        f"version: 1\nname: {name}\nenvelope:\n{envelope}"
        "source:\n  type: postgres\n  dsn: ${JS_DSN}\n"
        f"  tables: [public.{TABLE}]\n  snapshot: initial\n  status_interval_s: 1\n"
        f"log:\n  type: kafka\n  bootstrap_servers: {bootstrap}\n  partitions: 2\n"
        "  session_timeout_ms: 6000\n"
    )
    return pipeline


def test_jdbc_sink_applies_our_topic_with_debeziums_defaults(
    pg_db: str, target_db: str, kafka_server: Any, connect_worker: ConnectWorker, tmp_path: Path
) -> None:
    """Our records under Debezium's default options, applied by Debezium's JDBC sink."""
    execute(pg_db, [DDL, *SNAPSHOT])
    name = f"js{uuid.uuid4().hex[:8]}"
    pipeline = write_pipeline(tmp_path, name, kafka_server.bootstrap_servers)
    env = {"JS_DSN": pg_db}
    run = start_run(pipeline, tmp_path, env, "--role", "source")
    sink = add_sink(connect_worker, target_db, f"{name}.public.{TABLE}")
    try:
        # The snapshot first, so every change after it reaches the sink by the stream.
        await_source(run, tmp_path, lambda: wait_snapshot(connect_worker, sink, pg_db, target_db))
        execute(pg_db, [statement for statement, _ in STREAM])
        source_rows = table_rows(pg_db)
        assert source_rows is not None and len(source_rows) == 5
        await_rows(connect_worker, sink, target_db, source_rows, timeout_s=90)
    finally:
        connect_worker.remove_sink(sink)
        if run.poll() is None:
            stop(run, signal.SIGTERM, timeout=30)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def wait_snapshot(worker: ConnectWorker, sink: str, source: str, target: str) -> None:
    snapshot = table_rows(source)
    assert snapshot is not None
    await_rows(worker, sink, target, snapshot, timeout_s=120)


def await_source(run: Any, cwd: Path, wait: Callable[[], None]) -> None:
    """Runs ``wait``, failing with the source's log should the source have exited meanwhile."""
    try:
        wait()
    except (AssertionError, ServiceError):
        if run.poll() is not None:
            log = (cwd / "run.log").read_text()[-4000:]
            raise AssertionError(f"cdc run exited {run.returncode}:\n{log}") from None
        raise
