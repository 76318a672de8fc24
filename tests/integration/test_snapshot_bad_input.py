"""Bad input in snapshots: tables without a key, chunks that fail and are retried, chunks that
keep failing. The failing chunk is made real, not mocked: a row-level security policy calls a
function that raises for one row while the snapshot workers read (``application_name`` tells
their connections apart), for a role that is not a superuser (superusers bypass policies)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from structlog.testing import capture_logs

from tests.integration.snapshot_kit import execute, pipeline


def test_a_table_without_a_key_is_read_in_ctid_ranges_with_a_warning(
    pg_db: str, tmp_path: Path
) -> None:
    execute(
        pg_db,
        "CREATE TABLE nokey (id int NOT NULL, v text)",
        "ALTER TABLE nokey REPLICA IDENTITY FULL",
        "INSERT INTO nokey SELECT g, repeat('x', 200) FROM generate_series(1, 3000) g",
        "ANALYZE nokey",
    )
    with (
        capture_logs() as logs,
        pipeline(pg_db, tmp_path / "log", ["public.nokey"], snapshot_chunk_rows=500) as p,
    ):
        p.start()
        p.wait(p.snapshot_done)
        entry = p.snapshot_state()["tables"]["public.nokey"]
        assert entry["method"] == "ctid"
        assert entry["chunks_total"] >= 5
        assert entry["rows"] == 3000
        assert len(p.topic_state("public.nokey")) == 3000
    [warning] = [e for e in logs if e["event"] == "snapshot.ctid_chunks"]
    assert warning["log_level"] == "warning"
    assert "no primary key" in warning["reason"]


def test_configured_snapshot_key_columns_give_keyset_chunks(pg_db: str, tmp_path: Path) -> None:
    execute(
        pg_db,
        "CREATE TABLE nokey (id int NOT NULL UNIQUE, v text)",
        "INSERT INTO nokey SELECT g, 'v' FROM generate_series(1, 1000) g",
    )
    options = {
        "key_columns": {"public.nokey": ["id"]},
        "snapshot_key_columns": {"public.nokey": ["id"]},
        "snapshot_chunk_rows": 300,
    }
    with pipeline(pg_db, tmp_path / "log", ["public.nokey"], **options) as p:
        p.start()
        p.wait(p.snapshot_done)
        entry = p.snapshot_state()["tables"]["public.nokey"]
        assert (entry["method"], entry["chunks_total"], entry["rows"]) == ("keyset", 4, 1000)
        assert sorted(p.topic_state("public.nokey")) == list(range(1, 1001))


def test_nullable_snapshot_key_columns_are_a_clear_error(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, "CREATE TABLE t (id int PRIMARY KEY, code int)", "INSERT INTO t VALUES (1, 1)")
    options = {"snapshot_key_columns": {"public.t": ["code"]}}
    with pipeline(pg_db, tmp_path / "log", ["public.t"], **options) as p:
        p.start()
        with pytest.raises(
            AssertionError, match=r"must name existing NOT NULL.*nullable: \['code'\]"
        ):
            p.wait(lambda: False, 20)


def test_a_table_that_cannot_be_keyed_is_a_clear_error(pg_db: str, tmp_path: Path) -> None:
    execute(pg_db, "CREATE TABLE nokey (id int, v text)", "INSERT INTO nokey VALUES (1, 'a')")
    with pipeline(pg_db, tmp_path / "log", ["public.nokey"]) as p:
        p.start()
        with pytest.raises(AssertionError, match="no primary key"):
            p.wait(lambda: False, 20)


@pytest.fixture
def flaky_role(pg_db: str) -> Iterator[str]:
    """A DSN of a non-superuser owner of table ``t`` whose row 777 fails while snapshot workers
    read it, as long as ``flaky.fails`` is positive."""
    role = f"snap_{uuid.uuid4().hex[:8]}"
    database = conninfo_to_dict(pg_db)["dbname"]
    execute(
        pg_db,
        f"CREATE ROLE {role} LOGIN REPLICATION PASSWORD 'pw'",
        f'GRANT CREATE ON DATABASE "{database}" TO {role}',
        "CREATE TABLE flaky (fails int NOT NULL)",
        "INSERT INTO flaky VALUES (2)",
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 2000) g",
        """CREATE FUNCTION boom(k int) RETURNS bool LANGUAGE plpgsql VOLATILE SECURITY DEFINER
           AS $$ BEGIN
             IF k = 777 AND current_setting('application_name') = 'cdc-snapshot'
                AND (SELECT fails FROM flaky) > 0 THEN
               RAISE EXCEPTION 'chunk reader hit row %', k;
             END IF;
             RETURN true;
           END $$""",
        "CREATE POLICY p ON t USING (boom(id))",
        "ALTER TABLE t ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE t FORCE ROW LEVEL SECURITY",
        f"ALTER TABLE t OWNER TO {role}",
    )
    try:
        yield make_conninfo(pg_db, user=role, password="pw")
    finally:
        # Also revokes the role's privileges on the database, so the role can go.
        execute(pg_db, f"DROP OWNED BY {role} CASCADE")
        execute(make_conninfo(pg_db, dbname="postgres"), f"DROP ROLE {role}")


def test_a_failing_chunk_is_retried(flaky_role: str, pg_db: str, tmp_path: Path) -> None:
    # The failure rolls the reader's transaction back, so the counter must live outside it:
    # a sequence is not transactional.
    execute(
        pg_db,
        "CREATE SEQUENCE attempts",
        """CREATE OR REPLACE FUNCTION boom(k int) RETURNS bool LANGUAGE plpgsql VOLATILE
           SECURITY DEFINER AS $$ BEGIN
             IF k = 777 AND current_setting('application_name') = 'cdc-snapshot'
                AND nextval('attempts') <= 2 THEN
               RAISE EXCEPTION 'chunk reader hit row %', k;
             END IF;
             RETURN true;
           END $$""",
    )
    with (
        capture_logs() as logs,
        pipeline(flaky_role, tmp_path / "log", ["public.t"], snapshot_chunk_rows=500) as p,
    ):
        p.start()
        p.wait(p.snapshot_done, 60)
        assert sorted(p.topic_state("public.t")) == list(range(1, 2001))
    retries = [e for e in logs if e["event"] == "snapshot.chunk_retry"]
    assert [(e["chunk"], e["attempt"]) for e in retries] == [(1, 1), (1, 2)]
    assert "row 777" in retries[0]["error"]


def test_a_chunk_that_keeps_failing_stops_the_run_and_progress_stays_valid(
    flaky_role: str, pg_db: str, tmp_path: Path
) -> None:
    execute(pg_db, "UPDATE flaky SET fails = 1000")
    with pipeline(
        flaky_role, tmp_path / "log", ["public.t"], snapshot_chunk_rows=500, snapshot_workers=1
    ) as p:
        p.start()
        with pytest.raises(AssertionError, match=r"public\.t failed in chunk 1 after 3 retries"):
            p.wait(lambda: False, 60)
        entry = p.snapshot_state()["tables"]["public.t"]
        assert entry["done"] == [[0, 0]]  # chunk 0 was read and stored; chunk 1 is not claimed
        keys = set(p.topic_state("public.t"))
        assert set(range(1, 501)) <= keys
        execute(pg_db, "UPDATE flaky SET fails = 0")
        p.error = None
        p.start()  # resumes with watermarks: the exported snapshot is gone
        p.wait(p.snapshot_done, 60)
        assert sorted(p.topic_state("public.t")) == list(range(1, 2001))
