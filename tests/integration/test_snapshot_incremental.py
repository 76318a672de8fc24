"""Watermark (incremental) snapshots requested through the change stream, as ``cdc snapshot``
does, against a real PostgreSQL 15."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from structlog.testing import capture_logs

from connectors.postgres.snapshot.channel import Channel
from connectors.postgres.snapshot.signal import request_snapshot
from tests.integration.snapshot_kit import PIPELINE, execute, pipeline


def make_table(dsn: str) -> None:
    execute(
        dsn,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 2000) g",
    )


@pytest.mark.pgcore
def test_where_restricts_the_rows(pg_db: str, tmp_path: Path) -> None:
    make_table(pg_db)
    with pipeline(
        pg_db, tmp_path / "log", ["public.t"], snapshot="never", snapshot_chunk_rows=500
    ) as p:
        p.start()
        p.wait(lambda: bool(p.sources) and p.sources[0].streaming)
        request = request_snapshot(p.config, PIPELINE, "public.t", "id % 10 = 0 AND v <> ''")
        p.wait(lambda: request["id"] in (p.snapshot_state().get("finished") or []))
        entry = p.snapshot_state()["tables"]["public.t"]
        assert (entry["rows"], entry["chunks_total"], entry["where"]) == (
            200,
            5,  # boundaries every 500 keys: the last chunk, past 2000, is empty
            "id % 10 = 0 AND v <> ''",
        )
        assert sorted(p.topic_state("public.t")) == list(range(10, 2001, 10))


def test_a_request_for_a_table_not_captured_is_ignored_with_a_warning(
    pg_db: str, tmp_path: Path
) -> None:
    make_table(pg_db)
    with pipeline(pg_db, tmp_path / "log", ["public.t"], snapshot="never") as p:
        with capture_logs() as logs:
            p.start()
            p.wait(lambda: bool(p.sources) and p.sources[0].streaming)
            with psycopg.connect(pg_db, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_logical_emit_message(true, %s, %s)",
                    (Channel(PIPELINE).prefix("signal"), '{"id": "x", "table": "public.other"}'),
                )
            p.wait(lambda: any(e["event"] == "snapshot.signal_ignored" for e in logs))
        [ignored] = [e for e in logs if e["event"] == "snapshot.signal_ignored"]
        assert "public.other is not captured" in ignored["reason"]
        assert "tables" not in p.snapshot_state() or not p.snapshot_state()["tables"]


def test_a_failing_watermark_chunk_fails_its_request_and_the_stream_goes_on(
    pg_db: str, tmp_path: Path
) -> None:
    make_table(pg_db)
    with pipeline(
        pg_db, tmp_path / "log", ["public.t"], snapshot="never", snapshot_chunk_rows=500
    ) as p:
        with capture_logs() as logs:
            p.start()
            p.wait(lambda: bool(p.sources) and p.sources[0].streaming)
            # Division by zero on row 1500 only: chunk 2 fails, the rows of 0 and 1 are written.
            request = request_snapshot(p.config, PIPELINE, "public.t", "100 / (id - 1500) > -1")
            p.wait(lambda: bool(p.snapshot_state().get("failed")))
            execute(pg_db, "UPDATE t SET v = 'after the failure' WHERE id = 7")
            p.wait(lambda: p.topic_state("public.t").get(7, {}).get("v") == "after the failure")
        [failure] = p.snapshot_state()["failed"]
        assert failure["id"] == request["id"]
        assert "chunk 2" in failure["reason"] and "division by zero" in failure["reason"]
        assert "public.t" not in p.snapshot_state()["tables"]  # a restart does not replay it
        assert p.error is None and len(p.sources) == 1  # the stream never stopped
        [logged] = [e for e in logs if e["event"] == "snapshot.request_failed"]
        assert logged["request"] == request["id"] and "division by zero" in logged["reason"]
        assert not [e for e in logs if e["event"] == "snapshot.chunk_retry"]  # not retriable


@pytest.fixture
def role_without_messages(pg_db: str) -> Iterator[str]:
    """A DSN of a non-superuser that owns ``t`` and may not run ``pg_logical_emit_message``
    (revoked in this database only), so watermarks and signals must use the signal table."""
    role = f"snap_{uuid.uuid4().hex[:8]}"
    database = conninfo_to_dict(pg_db)["dbname"]
    make_table(pg_db)
    execute(
        pg_db,
        f"CREATE ROLE {role} LOGIN REPLICATION PASSWORD 'pw'",
        f'GRANT CREATE ON DATABASE "{database}" TO {role}',
        f"GRANT CREATE ON SCHEMA public TO {role}",
        f"ALTER TABLE t OWNER TO {role}",
    )
    # The text variant by its argument types: PostgreSQL 17 added a fourth (``flush``).
    with psycopg.connect(pg_db) as conn:
        [(function,)] = conn.execute(
            "SELECT oid::regprocedure::text FROM pg_proc"
            " WHERE proname = 'pg_logical_emit_message' AND proargtypes[2] = 'text'::regtype"
        ).fetchall()
    execute(pg_db, f"REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC")
    try:
        yield make_conninfo(pg_db, user=role, password="pw")
    finally:
        execute(pg_db, f"DROP OWNED BY {role} CASCADE")
        execute(make_conninfo(pg_db, dbname="postgres"), f"DROP ROLE {role}")


@pytest.mark.pgcore
@pytest.mark.parametrize("write_records", [False, True], ids=["events", "records"])
def test_a_role_without_logical_messages_uses_the_signal_table(
    role_without_messages: str, pg_db: str, tmp_path: Path, write_records: bool
) -> None:
    dsn = role_without_messages
    options = {"snapshot": "never", "snapshot_chunk_rows": 500}
    log = tmp_path / "log"
    with pipeline(dsn, log, ["public.t"], write_records=write_records, **options) as p:
        p.start()
        p.wait(lambda: bool(p.sources) and p.sources[0].streaming)
        execute(pg_db, "UPDATE t SET v = 'streamed' WHERE id = 3", "DELETE FROM t WHERE id = 4")
        request = request_snapshot(p.config, PIPELINE, "public.t", None)
        p.wait(lambda: request["id"] in (p.snapshot_state().get("finished") or []))
        p.wait(lambda: p.matches("public.t"))
        assert p.topic_state("public.t")[3]["v"] == "streamed"
        topics = {t.name for t in p.log.topics()}
        assert f"{PIPELINE}.public.{PIPELINE}_cdc_signal" not in topics
    with psycopg.connect(pg_db, autocommit=True) as conn:
        query = f"SELECT array_agg(DISTINCT kind) FROM {PIPELINE}_cdc_signal"
        [(kinds,)] = conn.execute(query).fetchall()  # type: ignore[call-overload]
    assert kinds == ["signal"]  # watermark rows are cleaned up once delivered
