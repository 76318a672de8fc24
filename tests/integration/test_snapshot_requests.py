"""Online snapshot requests that fail or are cancelled never stop the stream (real PostgreSQL).

A request whose ``--where`` fails at run time is marked failed with its reason; one cancelled
while queued, running or failed is dropped; a lost connection in a chunk read is retried; the
chunk read is read-only, so a ``--where`` that would write fails instead of writing.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from structlog.testing import capture_logs

from cdc.contracts.errors import ConfigError
from connectors.postgres.snapshot.signal import cancel_snapshot, request_snapshot
from tests.integration.snapshot_kit import PIPELINE, execute, pipeline

#: Slow enough (about 2 ms a row) that a request is still running when the test acts on it.
SLOW = "pg_sleep(0.002)::text = ''"


def make_table(dsn: str, rows: int = 2000) -> None:
    execute(
        dsn,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        f"INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, {rows}) g",
        "CREATE SEQUENCE s",
    )


def sequence_value(dsn: str) -> tuple[int, bool]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT last_value, is_called FROM s").fetchone()
    assert row is not None
    return int(row[0]), bool(row[1])


def test_a_where_that_writes_is_refused_and_the_sequence_does_not_move(
    pg_db: str, tmp_path: Path
) -> None:
    make_table(pg_db)
    with pipeline(
        pg_db, tmp_path / "log", ["public.t"], snapshot="never", snapshot_chunk_rows=500
    ) as p:
        p.start()
        p.wait(lambda: bool(p.sources) and p.sources[0].streaming)
        with pytest.raises(ConfigError, match="read-only transaction"):
            request_snapshot(p.config, PIPELINE, "public.t", "nextval('s') > 0")
        # The check's sample (the first rows) never reaches nextval(); the chunk reads do.
        where = "CASE WHEN id <= 150 THEN true ELSE nextval('s') > 0 END"
        request = request_snapshot(p.config, PIPELINE, "public.t", where)
        p.wait(lambda: bool(p.snapshot_state().get("failed")))
        [failure] = p.snapshot_state()["failed"]
        assert failure["id"] == request["id"]
        assert "read-only transaction" in failure["reason"]
        assert p.error is None
    assert sequence_value(pg_db) == (1, False)  # never called


def test_a_lost_connection_in_a_chunk_read_is_retried(pg_db: str, tmp_path: Path) -> None:
    make_table(pg_db, 1000)
    with pipeline(
        pg_db, tmp_path / "log", ["public.t"], snapshot="never", snapshot_chunk_rows=500
    ) as p:
        with capture_logs() as logs:
            p.start()
            p.wait(lambda: bool(p.sources) and p.sources[0].streaming)
            request = request_snapshot(p.config, PIPELINE, "public.t", SLOW)
            p.wait(lambda: terminate_reader(pg_db))
            p.wait(lambda: request["id"] in (p.snapshot_state().get("finished") or []))
        retries = [e for e in logs if e["event"] == "snapshot.chunk_retry"]
        assert retries and retries[0]["table"] == "public.t"
        assert not p.snapshot_state()["failed"]
        assert p.matches("public.t")


def terminate_reader(dsn: str) -> bool:
    """Kill the snapshot reader's backend while it reads a chunk; True once one was killed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'cdc-snapshot' AND state = 'active'"
            " AND query LIKE 'COPY%'"
        ).fetchone()
    return bool(row and row[0])


def test_cancel_drops_a_running_and_a_queued_request(pg_db: str, tmp_path: Path) -> None:
    make_table(pg_db)
    with pipeline(
        pg_db, tmp_path / "log", ["public.t"], snapshot="never", snapshot_chunk_rows=200
    ) as p:
        with capture_logs() as logs:
            p.start()
            p.wait(lambda: bool(p.sources) and p.sources[0].streaming)
            running = request_snapshot(p.config, PIPELINE, "public.t", SLOW)
            queued = request_snapshot(p.config, PIPELINE, "public.t", None)
            p.wait(lambda: chunks_done(p.snapshot_state()) >= 1)
            assert [r["id"] for r in p.snapshot_state()["requests"]] == [queued["id"]]
            cancel_snapshot(p.config, PIPELINE, queued["id"])
            cancel_snapshot(p.config, PIPELINE, running["id"])
            p.wait(lambda: running["id"] in p.snapshot_state().get("cancelled", []))
            state = p.snapshot_state()
            assert state["requests"] == [] and "public.t" not in state["tables"]
            assert queued["id"] in state["cancelled"]
            # A later request is read in full, and the cancelled ones are never read again.
            later = request_snapshot(p.config, PIPELINE, "public.t", "id <= 400")
            p.wait(lambda: later["id"] in (p.snapshot_state().get("finished") or []))
        planned = {e["request"] for e in logs if e["event"] == "snapshot.planned"}
        assert planned == {running["id"], later["id"]}
        [cancelled] = [e for e in logs if e["event"] == "snapshot.cancelled" and e["dropped"]][1:]
        assert cancelled["dropped"] == [
            {"id": running["id"], "table": "public.t", "state": "running"}
        ]
        assert p.snapshot_state()["tables"]["public.t"]["rows"] == 400
        assert p.error is None and len(p.sources) == 1


def chunks_done(state: dict[str, object]) -> int:
    entry = (state.get("tables") or {}).get("public.t")  # type: ignore[attr-defined]
    return sum(b - a + 1 for a, b in entry["done"]) if entry else 0


def test_cancel_all_drops_a_failed_request_across_a_restart(pg_db: str, tmp_path: Path) -> None:
    make_table(pg_db)
    options = {"snapshot": "never", "snapshot_chunk_rows": 500}
    with pipeline(pg_db, tmp_path / "log", ["public.t"], **options) as p:
        with capture_logs() as logs:
            p.start()
            p.wait(lambda: bool(p.sources) and p.sources[0].streaming)
            request_snapshot(p.config, PIPELINE, "public.t", "100 / (id - 1500) > -1")
            p.wait(lambda: bool(p.snapshot_state().get("failed")))
            p.stop()
            # Written while the pipeline is down: acted on when it reads the stream again.
            signal = cancel_snapshot(p.config, PIPELINE, None)
            p.start()
            p.wait(lambda: signal["id"] in p.snapshot_state().get("cancelled", []))
        assert p.snapshot_state()["failed"] == []
        assert not [e for e in logs if e["event"] == "snapshot.planned"][1:]  # never replayed
        assert p.error is None
