"""The PostgreSQL sink's schema changes, crash safety, reconnection, errors and doctor check,
against a real PostgreSQL server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import ValidationError

from cdc.contracts.errors import RecordError, SinkFatal, SinkUnavailable
from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from cdc.support.logging import get_logger
from cdc.support.wait import wait_until
from sinks.postgres import PostgresSink, PostgresSinkConfig, PostgresSinkPlugin
from tests.integration.duckdb_kit import event, item
from tests.integration.postgres_sink_kit import Harness

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-Pa55word"


@pytest.fixture
def wh(pg_db: str) -> Iterator[Harness]:
    harness = Harness(pg_db)
    yield harness
    harness.close()


def _types(wh: Harness, table: str = "items") -> dict[str, str]:
    return dict(
        wh.sql(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            [f"replica.{table}"],
        )
    )


def _publish_items(wh: Harness, *extra: Column, qty: str = "integer") -> None:
    wh.schemas.publish(
        "items",
        Column("id", "bigint", key=True, nullable=False),
        Column("name", "text"),
        Column("qty", qty),
        *extra,
    )


# -- schema changes ------------------------------------------------------------------------------


def test_added_columns_are_added_and_widened_types_altered(wh: Harness) -> None:
    _publish_items(wh, Column("code", "varchar(4)"), Column("price", "numeric(6,2)"))
    wh.apply(item(Op.CREATE, 1, 10, "a", 1, code="ab", price="12.50"))
    _publish_items(
        wh,
        Column("code", "varchar(40)"),
        Column("price", "numeric(12,3)"),
        Column("seen", "timestamp with time zone"),
        qty="bigint",
    )
    wh.apply(item(Op.CREATE, 2, 20, "b", 2**40, code="a longer code", price="123456.125"))
    assert _types(wh) | {} == {
        "id": "bigint",
        "name": "text",
        "qty": "bigint",
        "code": "character varying(40)",
        "price": "numeric(12,3)",
        "seen": "timestamp with time zone",
        "_cdc_pos": "bigint",
        "_cdc_seq": "bigint",
    }
    rows = wh.sql("SELECT id, qty, code, price::text, seen FROM replica.items ORDER BY id")
    assert rows == [(1, 1, "ab", "12.500", None), (2, 2**40, "a longer code", "123456.125", None)]


def test_a_narrowed_type_stops_this_sink_with_the_fix(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    _publish_items(wh, qty="smallint")
    fix = r"PostgreSQL sink wh: .*qty changed type .* not a widening .*cdc sink FILE wh --reset"
    with pytest.raises(SinkFatal, match=fix):
        wh.apply(item(Op.CREATE, 2, 20, "b", 2))
    assert wh.names() == {1: ("a", 1)}  # nothing of the batch, nor the ALTER
    assert _types(wh)["qty"] == "integer"


def test_a_changed_key_stops_this_sink(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.schemas.publish(
        "items",
        Column("id", "bigint", nullable=False),
        Column("name", "text", key=True, nullable=False),
        Column("qty", "integer"),
    )
    with pytest.raises(SinkFatal, match=r"key columns changed from \['id'\] to \['name'\]"):
        wh.apply(item(Op.CREATE, 2, 20, "b", 2))


def test_a_key_widened_is_widened_in_the_deleted_keys_too(wh: Harness) -> None:
    wh.schemas.publish(
        "items", Column("id", "integer", key=True, nullable=False), Column("name", "text")
    )
    wh.apply(event(Op.CREATE, {"id": 1}, {"id": 1, "name": "a"}, 10))
    wh.apply(event(Op.DELETE, {"id": 2}, None, 11))
    wh.schemas.publish(
        "items", Column("id", "bigint", key=True, nullable=False), Column("name", "text")
    )
    wh.apply(event(Op.CREATE, {"id": 2**40}, {"id": 2**40, "name": "big"}, 20))
    assert _types(wh)["id"] == _types(wh, "items__cdc_deleted")["id"] == "bigint"
    assert wh.sql("SELECT id FROM replica.items ORDER BY id") == [(1,), (2**40,)]


def test_a_table_announced_on_the_schema_topic_is_created_empty(wh: Harness) -> None:
    schema_record = wh.records(event(Op.CREATE, {"id": 1}, {"id": 1}, 1))[0]
    announced = type(schema_record)(
        "shop.__schemas", 0, 0, {"schema": "public", "table": "items"}, {"table": "items"}
    )
    wh.write([announced])
    assert wh.names() == {}
    assert "qty" in _types(wh)


# -- crash safety --------------------------------------------------------------------------------


def test_a_kill_during_a_flush_leaves_neither_its_rows_nor_its_offsets(pg_db: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.postgres_sink_child", pg_db],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        while (line := child.stdout.readline()) and line.strip() != "ready":
            pass  # the child's log lines
        assert line.strip() == "ready"
        with psycopg.connect(pg_db) as lock:
            # Batch 2's offsets wait for this lock after its rows are written, in its transaction.
            lock.execute("SELECT * FROM replica._cdc_offsets FOR UPDATE")
            child.stdin.write("go\n")
            child.stdin.flush()
            wait_until(lambda: _waiting_for_lock(lock), 30, 0.05)
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    harness = Harness(pg_db)
    try:
        assert harness.names() == {k: (f"n{k}", k) for k in range(1, 4)}
        assert harness.sql("SELECT next_offset FROM replica._cdc_offsets") == [(3,)]
        # Restarted: the runner reads from the stored offset, so batch 2 comes again.
        harness.next_offset = {(k[0], 0): 3 for k in harness.sink.stored_offsets()}
        harness.apply(
            item(Op.UPDATE, 1, 20, "changed", 10),
            item(Op.DELETE, 2, 21),
            item(Op.CREATE, 4, 22, "n4", 4),
        )
        assert harness.names() == {1: ("changed", 10), 3: ("n3", 3), 4: ("n4", 4)}
    finally:
        harness.close()


def _waiting_for_lock(conn: psycopg.Connection[Any]) -> bool:
    found = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'cdc-sink-wh' "
        "AND wait_event_type = 'Lock'"
    ).fetchone()
    return found is not None and found[0] > 0


def test_a_lost_connection_is_retriable_and_the_retry_applies(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'cdc-sink-wh'"
    )
    batch = wh.records(item(Op.CREATE, 2, 11, "b", 2))
    with pytest.raises(SinkUnavailable):
        wh.write(batch)
    wh.write(batch)  # the runner's retry of the same batch, on the same sink
    assert wh.names() == {1: ("a", 1), 2: ("b", 2)}


# -- errors --------------------------------------------------------------------------------------


def test_a_value_the_column_refuses_is_a_record_error_naming_the_column(wh: Harness) -> None:
    _publish_items(wh, Column("ref", "uuid"))
    wh.apply(item(Op.CREATE, 1, 10, "a", 1, ref=None))
    good = wh.records(item(Op.CREATE, 3, 12, "c", 3, ref=None))
    bad = wh.records(item(Op.CREATE, 2, 11, "b", 2, ref="not-a-uuid-SECRETVALUE"))
    with pytest.raises(RecordError, match="column ref") as caught:
        wh.write(good + bad)
    assert caught.value.record is bad[0]
    assert "SECRETVALUE" not in str(caught.value)
    assert wh.names() == {1: ("a", 1)}  # nothing of the batch


def test_a_wrong_password_is_fatal_and_never_shown(pg_server: Any, pg_db: str) -> None:
    dsn = pg_server.dsn_for(password=SECRET, dbname="postgres")
    sink = _sink(dsn)
    with pytest.raises(SinkFatal) as caught:
        sink.open()
    assert SECRET not in str(caught.value)
    assert "password authentication failed" in str(caught.value)


def test_an_unreachable_server_is_retriable_and_the_password_never_shown() -> None:
    sink = _sink(f"postgresql://cdc:{SECRET}@127.0.0.1:1/db")
    with pytest.raises(SinkUnavailable) as caught:
        sink.open()
    assert SECRET not in str(caught.value)
    assert "127.0.0.1" in str(caught.value)


def test_an_invalid_dsn_is_a_config_error_without_the_secret() -> None:
    with pytest.raises(ValidationError) as caught:
        PostgresSinkConfig(name="wh", dsn=f"host=x password={SECRET} bogus")
    messages = [e["msg"] for e in caught.value.errors()]  # what cdc validate prints
    assert any("not a valid libpq connection string" in m for m in messages)
    assert all(SECRET not in m for m in messages)


def test_the_dsn_is_never_in_the_logs(pg_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    harness = Harness(pg_db)
    harness.apply(item(Op.CREATE, 1, 10, "a", 1))
    harness.close()
    password = psycopg.conninfo.conninfo_to_dict(pg_db)["password"]
    out = capsys.readouterr()
    assert "postgres.opened" in out.out + out.err
    assert str(password) not in out.out + out.err


def _sink(dsn: str) -> PostgresSink:
    from cdc.contracts.sink import SinkContext
    from tests.integration.duckdb_kit import Schemas

    config = PostgresSinkConfig(name="wh", dsn=dsn, connect_timeout_s=3)
    return PostgresSink(config, SinkContext("shop", "wh", [], Schemas(), get_logger()))


# -- doctor --------------------------------------------------------------------------------------


def test_doctor_passes_on_a_usable_target(pg_db: str) -> None:
    checks = PostgresSinkPlugin.doctor(PostgresSinkConfig(name="wh", dsn=pg_db), "shop")
    assert [(c.name, c.ok) for c in checks] == [
        ("reachable", True),
        ("version", True),
        ("permitted", True),
    ]


def test_doctor_names_the_grant_a_user_without_create_needs(pg_server: Any, pg_db: str) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS cdc_reader")
        conn.execute(f"CREATE ROLE cdc_reader LOGIN PASSWORD '{SECRET}'".encode())
        conn.execute("CREATE SCHEMA locked")
    dsn = pg_server.dsn_for(user="cdc_reader", password=SECRET, dbname=pg_db.rsplit("/", 1)[1])
    try:
        checks = PostgresSinkPlugin.doctor(
            PostgresSinkConfig(name="wh", dsn=dsn, schema="locked"), "shop"
        )
        permitted = {c.name: c for c in checks}["permitted"]
        assert not permitted.ok
        assert "GRANT CREATE ON SCHEMA locked TO cdc_reader" in (permitted.fix or "")
        assert all(SECRET not in f"{c.detail} {c.fix}" for c in checks)
    finally:
        with psycopg.connect(pg_db, autocommit=True) as conn:
            conn.execute("DROP SCHEMA locked")
            conn.execute("DROP ROLE cdc_reader")


def test_doctor_reports_an_unreachable_target() -> None:
    config = PostgresSinkConfig(
        name="wh", dsn=f"postgresql://u:{SECRET}@127.0.0.1:1/db", connect_timeout_s=2
    )
    checks = PostgresSinkPlugin.doctor(config, "shop")
    assert [(c.name, c.ok) for c in checks] == [("reachable", False)]
    assert SECRET not in f"{checks[0].detail} {checks[0].fix}"


# -- several workers (Kafka spreads a sink's partitions over them) -----------------------------


def test_two_workers_of_one_sink_start_create_and_evolve_a_table_at_once(pg_db: str) -> None:
    barrier = threading.Barrier(2)

    def started() -> Harness:
        barrier.wait()  # both create the schema and the sink's tables at once
        return Harness(pg_db, sink="wh")

    with ThreadPoolExecutor(2) as pool:
        workers = [f.result() for f in [pool.submit(started) for _ in range(2)]]
    try:
        for round_, extra in enumerate(((), (Column("note", "text"),))):
            for worker in workers:
                _publish_items(worker, *extra)
            batches = [
                w.records(
                    item(Op.CREATE, 10 * round_ + n, 100 * round_ + n, f"w{n}", n), partition=n
                )
                for n, w in enumerate(workers)
            ]
            _at_once(workers, batches)  # neither races the other into a duplicate table or column
        assert workers[0].names() == {0: ("w0", 0), 1: ("w1", 1), 10: ("w0", 0), 11: ("w1", 1)}
        stored = workers[1].sink.stored_offsets()  # read again: both workers' partitions
        assert sorted(tp.partition for tp in stored) == [0, 1]
    finally:
        for worker in workers:
            worker.close()


def _at_once(workers: list[Harness], batches: list[Any]) -> None:
    barrier = threading.Barrier(len(workers))

    def flush(worker: Harness, batch: list[Any]) -> None:
        barrier.wait()
        worker.write(batch)

    with ThreadPoolExecutor(len(workers)) as pool:
        futures = [pool.submit(flush, w, b) for w, b in zip(workers, batches, strict=True)]
        for future in futures:
            future.result()
