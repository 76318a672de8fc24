"""Snapshot modes against a real PostgreSQL 15, through the runtime source task."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.integration.snapshot_kit import PIPELINE, execute, pipeline, table_state

ROWS = 5000


def make_table(dsn: str, rows: int = ROWS) -> None:
    execute(
        dsn,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        f"INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, {rows}) g",
    )


def decisions(logs: list[dict[str, object]]) -> list[object]:
    return [e["action"] for e in logs if e["event"] == "snapshot.decision"]


@pytest.mark.pgcore
def test_initial_snapshots_once_then_streams(pg_db: str, tmp_path: Path) -> None:
    make_table(pg_db)
    with pipeline(pg_db, tmp_path / "log", ["public.t"], snapshot_chunk_rows=1000) as p:
        p.start()
        p.wait(lambda: p.snapshot_done() and p.matches("public.t"))
        assert p.sources[0].chunks_read == 6
        p.stop()
        execute(pg_db, "UPDATE t SET v = 'after' WHERE id = 1")
        with capture_logs() as logs:
            p.start()
            p.wait(lambda: p.matches("public.t"))
        assert decisions(logs) == ["stream"]
        assert p.sources[-1].chunks_read == 0


def test_never_only_streams(pg_db: str, tmp_path: Path) -> None:
    make_table(pg_db)
    with pipeline(pg_db, tmp_path / "log", ["public.t"], snapshot="never") as p:
        p.start()
        p.wait(lambda: bool(p.sources) and p.sources[0].streaming)
        execute(pg_db, "INSERT INTO t VALUES (100000, 'new')")
        p.wait(lambda: 100000 in p.topic_state("public.t"))
        assert list(p.topic_state("public.t")) == [100000]
        assert "snapshot" not in p.offsets()


@pytest.mark.pgcore
def test_always_rereads_with_watermarks_while_streaming(pg_db: str, tmp_path: Path) -> None:
    make_table(pg_db)
    with pipeline(pg_db, tmp_path / "log", ["public.t"], snapshot="never") as p:
        p.start()
        p.wait(lambda: bool(p.sources) and p.sources[0].streaming)
        execute(pg_db, "INSERT INTO t VALUES (100000, 'new')")
        p.wait(lambda: 100000 in p.topic_state("public.t"))
        p.stop()
        p.config = p.config.model_copy(update={"snapshot": "always", "snapshot_chunk_rows": 2000})
        with capture_logs() as logs:
            p.start()
            p.wait(lambda: p.snapshot_done() and p.matches("public.t"))
        assert decisions(logs) == ["watermark_all"]
        entry = p.snapshot_state()["tables"]["public.t"]
        assert entry["kind"] == "incremental"
        assert entry["chunks_total"] == 3


@pytest.mark.pgcore
def test_when_needed_resnapshots_after_the_slot_was_lost(pg_db: str, tmp_path: Path) -> None:
    make_table(pg_db, 1000)
    with pipeline(pg_db, tmp_path / "log", ["public.t"], snapshot="when_needed") as p:
        p.start()
        p.wait(lambda: p.snapshot_done() and p.matches("public.t"))
        p.stop()
        execute(
            pg_db,
            f"SELECT pg_drop_replication_slot('{PIPELINE}_slot')",
            "INSERT INTO t VALUES (5000, 'while the slot was gone')",
            "UPDATE t SET v = 'changed while gone' WHERE id = 7",
        )
        with capture_logs() as logs:
            p.start()
            # Until the new snapshot stores its own state, the stored one is the first run's
            # (done), and the chunk holding 5000 may be written before the one holding 7: wait
            # for the topic to equal the table, as the first run does.
            p.wait(lambda: p.snapshot_done() and p.matches("public.t"))
        assert decisions(logs) == ["export"]
        reasons = [e["reason"] for e in logs if e["event"] == "snapshot.decision"]
        assert "slot is gone" in str(reasons[0])
        state = p.topic_state("public.t")
        assert state[7]["v"] == "changed while gone"
        assert state == table_state(pg_db, "public.t")


def test_initial_fails_loudly_when_the_slot_was_lost(pg_db: str, tmp_path: Path) -> None:
    make_table(pg_db, 100)
    with pipeline(pg_db, tmp_path / "log", ["public.t"]) as p:
        p.start()
        p.wait(lambda: p.snapshot_done() and p.matches("public.t"))
        p.stop()
        execute(pg_db, f"SELECT pg_drop_replication_slot('{PIPELINE}_slot')")
        p.start()
        with pytest.raises(AssertionError, match="no longer exists"):
            p.wait(lambda: False, 30)
