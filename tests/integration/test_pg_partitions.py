"""Partitioned tables in source.tables: published through the root, every partition's changes on
the root's topic (partitions created or attached while streaming too), a restart that finds the
root in the publication, the snapshot reading the root, and what a row moving between
partitions gives.

A row moving between partitions: PostgreSQL runs the UPDATE as a DELETE from the old partition
and an INSERT into the new one, and pgoutput (14 to 18, with publish_via_partition_root)
describes them as a Delete and an Insert of the root. A partitioned table's primary key must
hold its partition key, so the move changes the record key: the source gives what it gives for
any update of a primary key, a delete of the old key and a create of the new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from cdc.contracts.errors import SourceFatal
from cdc.contracts.events import ChangeEvent
from connectors.postgres.snapshot.signal import request_snapshot
from tests.integration import snapshot_kit
from tests.integration.pg_source_kit import PIPELINE, Harness, harness, query, sql

_EVENTS = (
    "CREATE TABLE events (id int, region text, v text, PRIMARY KEY (id, region))"
    " PARTITION BY LIST (region)",
    "CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('eu')",
    "CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('us')",
)


def _changes(events: list[ChangeEvent]) -> list[tuple[str, str, dict[str, Any], Any]]:
    return [
        (e.source.table, e.op.value, e.key, (e.after or {}).get("v") if e.after else None)
        for e in events
    ]


def _via_root(dsn: str) -> bool:
    [(via_root,)] = query(
        dsn, "SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (f"{PIPELINE}_pub",)
    )
    return bool(via_root)


@pytest.mark.pgcore
def test_a_partitioned_table_streams_through_its_root(pg_db: str, tmp_path: Path) -> None:
    sql(
        pg_db,
        *_EVENTS,
        "CREATE TABLE events_sa (LIKE events INCLUDING ALL)",
        "INSERT INTO events_sa VALUES (4, 'sa', 'before')",
    )
    with harness(pg_db, tmp_path / "log", ["public.events"]) as h:
        h.open()
        assert _via_root(pg_db)
        sql(
            pg_db,
            "INSERT INTO events VALUES (1, 'eu', 'a'), (2, 'us', 'b')",
            "UPDATE events_us SET v = 'b2' WHERE id = 2",  # through the partition itself
            "DELETE FROM events WHERE id = 1",
        )
        assert _changes(h.collect(4)) == [
            ("events", "c", {"id": 1, "region": "eu"}, "a"),
            ("events", "c", {"id": 2, "region": "us"}, "b"),
            ("events", "u", {"id": 2, "region": "us"}, "b2"),
            ("events", "d", {"id": 1, "region": "eu"}, None),
        ]
        # A restart finds the root in the publication (it failed with "already member").
        h.close()
        h.events.clear()
        h.open()
        # Partitions created, or attached with rows of their own, while streaming.
        sql(
            pg_db,
            "CREATE TABLE events_asia PARTITION OF events FOR VALUES IN ('asia')",
            "INSERT INTO events VALUES (3, 'asia', 'c')",
            "ALTER TABLE events ATTACH PARTITION events_sa FOR VALUES IN ('sa')",
            "UPDATE events SET v = 'attached' WHERE id = 4",
            "INSERT INTO events_sa VALUES (5, 'sa', 'e')",
        )
        assert _changes(h.collect(3)) == [
            ("events", "c", {"id": 3, "region": "asia"}, "c"),
            ("events", "u", {"id": 4, "region": "sa"}, "attached"),
            ("events", "c", {"id": 5, "region": "sa"}, "e"),
        ]
        assert {e.source.schema for e in h.events} == {"public"}


def test_a_table_written_while_streaming_then_attached(pg_db: str, tmp_path: Path) -> None:
    """15+: captured from the ATTACH on. 14: pgoutput keeps what it decided for the table
    before (not published) until the session ends, so its changes between the ATTACH and the
    next session are not streamed (PostgreSQL 14's relation cache is not invalidated by ATTACH
    PARTITION; 15 fixed it)."""
    sql(pg_db, *_EVENTS, "CREATE TABLE events_sa (LIKE events INCLUDING ALL)")
    with harness(pg_db, tmp_path / "log", ["public.events"]) as h:
        h.open()
        sql(
            pg_db,
            "INSERT INTO events_sa VALUES (1, 'sa', 'before')",  # decoded: not published
            "ALTER TABLE events ATTACH PARTITION events_sa FOR VALUES IN ('sa')",
            "INSERT INTO events VALUES (2, 'sa', 'after')",
            "INSERT INTO events VALUES (3, 'eu', 'marker')",
        )
        expected = [("events", "c", {"id": 2, "region": "sa"}, "after")]
        marker = [("events", "c", {"id": 3, "region": "eu"}, "marker")]
        if _version(pg_db) < 150000:
            expected = []  # the PostgreSQL 14 limitation above
        assert _changes(h.collect(len(expected) + 1)) == expected + marker
        h.close()
        h.events.clear()
        h.open()  # a new session: a new relation cache
        sql(pg_db, "INSERT INTO events_sa VALUES (4, 'sa', 'next session')")
        assert _changes(h.collect(1)) == [
            ("events", "c", {"id": 4, "region": "sa"}, "next session")
        ]


def _version(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.info.server_version


def test_a_row_moving_between_partitions_is_a_delete_and_a_create(
    pg_db: str, tmp_path: Path
) -> None:
    sql(pg_db, *_EVENTS, "INSERT INTO events VALUES (1, 'eu', 'a'), (2, 'eu', 'b')")
    with harness(pg_db, tmp_path / "log", ["public.events"]) as h:
        h.open()
        sql(pg_db, "UPDATE events SET region = 'us', v = 'moved' WHERE id = 1")
        sql(pg_db, "UPDATE events SET region = 'us' WHERE region = 'eu'")  # the rest, one tx
        events = h.collect(4)
        assert _changes(events) == [
            ("events", "d", {"id": 1, "region": "eu"}, None),
            ("events", "c", {"id": 1, "region": "us"}, "moved"),
            ("events", "d", {"id": 2, "region": "eu"}, None),
            ("events", "c", {"id": 2, "region": "us"}, "b"),
        ]
        assert events[0].before == {"id": 1, "region": "eu", "v": None}  # the replica identity
        assert events[1].source.position == events[0].source.position  # one transaction


def test_a_move_keyed_without_the_partition_key_is_a_delete_and_a_create_of_one_key(
    pg_db: str, tmp_path: Path
) -> None:
    """With source.key_columns leaving the partition key out, the server's pair has one record
    key: the topic's last record for it is the moved row (what an update would leave)."""
    sql(pg_db, *_EVENTS, "INSERT INTO events VALUES (1, 'eu', 'a')")
    keyed = {"key_columns": {"public.events": ["id"]}}
    with harness(pg_db, tmp_path / "log", ["public.events"], **keyed) as h:
        h.open()
        sql(pg_db, "UPDATE events SET region = 'us' WHERE id = 1")
        assert _changes(h.collect(2)) == [
            ("events", "d", {"id": 1}, None),
            ("events", "c", {"id": 1}, "a"),
        ]
        assert h.events[1].after == {"id": 1, "region": "us", "v": "a"}


def test_an_existing_publication_of_the_root_is_altered_to_publish_through_it(
    pg_db: str, tmp_path: Path
) -> None:
    sql(pg_db, *_EVENTS, f"CREATE PUBLICATION {PIPELINE}_pub FOR TABLE events")
    assert not _via_root(pg_db)
    with harness(pg_db, tmp_path / "log", ["public.events"]) as h:
        h.open()
        assert _via_root(pg_db)
        sql(pg_db, "INSERT INTO events VALUES (1, 'us', 'a')")
        assert _changes(h.collect(1)) == [("events", "c", {"id": 1, "region": "us"}, "a")]


def test_a_partition_named_with_its_root_is_a_config_error(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, *_EVENTS)
    h = Harness(pg_db, tmp_path / "log", ["public.events", "public.events_eu"])
    try:
        with pytest.raises(SourceFatal, match=r"names public\.events_eu and public\.events, a"):
            h.open()
    finally:
        h.close()
        h.log.close()
    assert not query(pg_db, "SELECT 1 FROM pg_publication WHERE pubname = %s", (f"{PIPELINE}_pub",))


def _table_rows(dsn: str, table: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT to_jsonb(t) FROM {table} t").fetchall()  # test-only SQL
    return sorted((r[0] for r in rows), key=_by_key)


def _topic_rows(p: snapshot_kit.Pipeline, table: str) -> list[dict[str, Any]]:
    return sorted(p.topic_state(table).values(), key=_by_key)


def _by_key(row: dict[str, Any]) -> tuple[int, str]:
    return row["id"], row["region"]


@pytest.mark.parametrize("keyed", [True, False], ids=["keyset", "ctid"])
def test_the_snapshot_reads_the_root(pg_db: str, tmp_path: Path, keyed: bool) -> None:
    """Initial chunks, then an online re-snapshot's, over every partition: by key range, or
    (no primary key) by ctid page ranges spanning the largest partition."""
    key = ", PRIMARY KEY (id, region)" if keyed else ""
    snapshot_kit.execute(
        pg_db,
        f"CREATE TABLE events (id int NOT NULL, region text NOT NULL, v text{key})"
        " PARTITION BY LIST (region)",
        "CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('eu')",
        "CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('us')",
        "INSERT INTO events SELECT g, CASE WHEN g % 3 = 0 THEN 'eu' ELSE 'us' END,"
        " repeat('x', 200) FROM generate_series(1, 3000) g",
        "ANALYZE events",
    )
    options: dict[str, Any] = {"snapshot": "initial", "snapshot_chunk_rows": 700}
    if not keyed:
        options["key_columns"] = {"public.events": ["id"]}
        snapshot_kit.execute(
            pg_db,
            "ALTER TABLE events_eu REPLICA IDENTITY FULL",
            "ALTER TABLE events_us REPLICA IDENTITY FULL",
        )
    with snapshot_kit.pipeline(pg_db, tmp_path / "log", ["public.events"], **options) as p:
        p.start()
        p.wait(p.snapshot_done)
        entry = p.snapshot_state()["tables"]["public.events"]
        assert entry["chunks_total"] >= 4 and entry["rows"] == 3000
        assert _topic_rows(p, "public.events") == _table_rows(pg_db, "events")
        snapshot_kit.execute(pg_db, "UPDATE events SET v = 'new' WHERE id % 100 = 0")
        request = request_snapshot(p.config, snapshot_kit.PIPELINE, "public.events", None)
        p.wait(lambda: request["id"] in (p.snapshot_state().get("finished") or []))
        assert _topic_rows(p, "public.events") == _table_rows(pg_db, "events")


def test_truncate_of_the_root_and_of_one_partition(pg_db: str, tmp_path: Path) -> None:
    """Through the root, pgoutput sends a TRUNCATE only when the statement names the root (or
    a table above it): a TRUNCATE of one partition alone is not published (14 to 18)."""
    sql(pg_db, *_EVENTS, "INSERT INTO events VALUES (1, 'eu', 'a'), (2, 'us', 'b')")
    with harness(pg_db, tmp_path / "log", ["public.events"]) as h:
        h.open()
        sql(
            pg_db,
            "TRUNCATE events_eu",
            "INSERT INTO events VALUES (3, 'eu', 'marker')",
            "TRUNCATE events",
            "INSERT INTO events VALUES (4, 'us', 'end')",
        )
        assert _changes(h.collect(3)) == [
            ("events", "c", {"id": 3, "region": "eu"}, "marker"),
            ("events", "t", {}, None),
            ("events", "c", {"id": 4, "region": "us"}, "end"),
        ]
