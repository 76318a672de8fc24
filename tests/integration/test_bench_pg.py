"""The PostgreSQL benches' own fixes, on a real server: ``bench/pg_snapshot.py`` drops its slot
once the walsender released it, and ``bench/pg_stream.py`` times one big transaction."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from bench import pg_snapshot, pg_stream
from cdc.contracts.errors import SourceFatal
from connectors.postgres import PostgresSourceConfig, drop_replication_objects
from connectors.postgres.replication.connection import ReplicationConnection

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.pgany  # the benches' own fixes: no version's behaviour is in question


def _slots(dsn: str) -> list[tuple[str, int | None]]:
    with psycopg.connect(dsn) as conn:
        return [
            (str(n), p)
            for n, p in conn.execute(
                "SELECT slot_name, active_pid FROM pg_replication_slots"
                " WHERE database = current_database()"
            )
        ]


def test_cdc_drop_and_the_snapshot_bench_drop_the_slot_once_released(pg_db: str) -> None:
    config = PostgresSourceConfig.model_validate(
        {"type": "postgres", "dsn": pg_db, "tables": ["public.t"]}
    )
    slot = config.slot_name(pg_snapshot.PIPELINE)
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute(
            f"CREATE PUBLICATION {config.publication_name(pg_snapshot.PIPELINE)} FOR TABLE t"
        )
    repl = ReplicationConnection(pg_db, "test", 10)
    repl.create_slot(slot)
    repl.start(slot, 0, {"proto_version": "1", "publication_names": "bench_pub"})
    assert _slots(pg_db)[0][1] is not None  # the slot is held, as right after the bench's run
    with pytest.raises(SourceFatal, match="is active"):  # what the bench's teardown hit
        drop_replication_objects(config, pg_snapshot.PIPELINE, release_wait_s=0)
    releaser = threading.Timer(1.0, repl.close)
    releaser.start()
    try:
        pg_snapshot.drop_when_released(config, pg_db)
    finally:
        releaser.join()
    assert _slots(pg_db) == []


def test_the_stream_bench_times_one_big_live_transaction(
    pg_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO_ROOT)  # the child runs as ``python -m bench.pg_stream``
    pg_stream.execute(pg_db, pg_stream.DDL)
    pg_stream.execute(pg_db, f"CREATE PUBLICATION {pg_stream.PIPELINE}_pub FOR TABLE bench")
    pg_stream.execute(
        pg_db, f"SELECT pg_create_logical_replication_slot('{pg_stream.PIPELINE}_slot', 'pgoutput')"
    )
    rows = 4000  # two full polls of 2,000 events: the commit then arrives in a poll of its own
    result = pg_stream.run_child(
        pg_db,
        tmp_path / "log",
        rows,
        timeout=120,
        on_ready=lambda: pg_stream.execute(pg_db, pg_stream.INSERT, (1, rows)),
    )
    assert result["rows"] == rows
    assert len(result["latencies_ms"]) == 1 and result["latencies_ms"][0] > 0
