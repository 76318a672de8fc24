"""Generated columns: a record carries exactly the columns pgoutput publishes, snapshot and stream
alike, so a table's rows keep one shape and no schema change churns.

- PostgreSQL 18: stored generated columns are published (the publication gets
  ``publish_generated_columns = stored``) and read by the snapshot; virtual ones cannot be
  published, and are in no record (a warning at start names them).
- 14 to 17: pgoutput leaves generated columns out of the stream, so the snapshot leaves them
  out too (a warning at start names them): a snapshot row carrying a value its next streamed
  change lacks would lose it in every sink that writes whole rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from structlog.testing import capture_logs

from tests.integration import snapshot_kit
from tests.integration.pg_source_kit import PIPELINE, harness, query, sql


def _version(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.info.server_version


def _not_captured(logs: list[dict[str, Any]]) -> dict[str, str]:
    return {
        ",".join(e["columns"]): e["reason"]
        for e in logs
        if e["event"] == "source.generated_columns_not_captured"
    }


@pytest.mark.pgcore
def test_generated_columns_are_in_the_records_where_pgoutput_publishes_them(
    pg_db: str, tmp_path: Path
) -> None:
    v18 = _version(pg_db) >= 180000
    snapshot_kit.execute(
        pg_db,
        "CREATE TABLE g (id int PRIMARY KEY, price int, qty int,"
        " total int GENERATED ALWAYS AS (price * qty) STORED)",
        "INSERT INTO g VALUES (1, 2, 3), (2, 5, 5)",
    )
    with (
        capture_logs() as logs,
        snapshot_kit.pipeline(pg_db, tmp_path / "log", ["public.g"], snapshot="initial") as p,
    ):
        p.start()
        p.wait(lambda: bool(p.sources) and p.sources[-1].streaming)
        snapshot_kit.execute(
            pg_db, "UPDATE g SET qty = 10 WHERE id = 1", "INSERT INTO g VALUES (3, 1, 7)"
        )
        p.wait(lambda: p.topic_state("public.g").get(3) is not None)  # after the update
        rows = p.topic_state("public.g")
        gencols = query(pg_db, "SELECT pubgencols::text FROM pg_publication") if v18 else None
    if v18:
        assert rows == {
            1: {"id": 1, "price": 2, "qty": 10, "total": 20},
            2: {"id": 2, "price": 5, "qty": 5, "total": 25},
            3: {"id": 3, "price": 1, "qty": 7, "total": 7},
        }
        assert gencols == [("s",)]
        assert _not_captured(logs) == {}
    else:
        assert rows == {
            1: {"id": 1, "price": 2, "qty": 10},
            2: {"id": 2, "price": 5, "qty": 5},
            3: {"id": 3, "price": 1, "qty": 7},
        }
        assert "from PostgreSQL 18" in _not_captured(logs)["total"]
    assert not [e for e in logs if e["event"].startswith("schema.")]


def test_virtual_generated_columns_are_in_no_record(pg_db: str, tmp_path: Path) -> None:
    if _version(pg_db) < 180000:
        pytest.skip("virtual generated columns are PostgreSQL 18's (CDC_TEST_PG_VERSION=18)")
    snapshot_kit.execute(
        pg_db,
        "CREATE TABLE g (id int PRIMARY KEY, price int,"
        " twice int GENERATED ALWAYS AS (price * 2) STORED,"
        " label text GENERATED ALWAYS AS ('item ' || id) VIRTUAL)",
        "INSERT INTO g VALUES (1, 2)",
    )
    with (
        capture_logs() as logs,
        snapshot_kit.pipeline(pg_db, tmp_path / "log", ["public.g"], snapshot="initial") as p,
    ):
        p.start()
        p.wait(lambda: bool(p.sources) and p.sources[-1].streaming)
        snapshot_kit.execute(pg_db, "INSERT INTO g VALUES (2, 4)")
        p.wait(lambda: len(p.topic_state("public.g")) == 2)
        rows = p.topic_state("public.g")
    assert rows == {
        1: {"id": 1, "price": 2, "twice": 4},
        2: {"id": 2, "price": 4, "twice": 8},
    }
    assert _not_captured(logs) == {"label": "PostgreSQL cannot publish virtual generated columns"}
    assert not [e for e in logs if e["event"].startswith("schema.")]


def test_an_existing_publication_is_set_to_publish_stored_generated_columns(
    pg_db: str, tmp_path: Path
) -> None:
    if _version(pg_db) < 180000:
        pytest.skip("publish_generated_columns needs PostgreSQL 18 (CDC_TEST_PG_VERSION=18)")
    sql(
        pg_db,
        "CREATE TABLE g (id int PRIMARY KEY, price int,"
        " twice int GENERATED ALWAYS AS (price * 2) STORED)",
        f"CREATE PUBLICATION {PIPELINE}_pub FOR TABLE g",
    )
    with harness(pg_db, tmp_path / "log", ["public.g"]) as h:
        h.open()
        sql(pg_db, "INSERT INTO g VALUES (1, 21)")
        assert [e.after for e in h.collect(1)] == [{"id": 1, "price": 21, "twice": 42}]
        assert query(pg_db, "SELECT pubgencols::text FROM pg_publication") == [("s",)]
