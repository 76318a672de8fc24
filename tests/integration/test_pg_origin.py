"""``source.skip_replicated`` (pgoutput's ``origin = none``, PostgreSQL 16+): the rows a logical
subscriber applied to the captured database are not streamed, its local writes are; without
the option both are. Below 16 the option stops the start, before anything is created.

The subscriber is real: a second database on the same test server publishes a table, and a
subscription in the captured database applies its rows. A subscription to the same cluster
cannot create its slot (CREATE SUBSCRIPTION would wait for itself), so the slot is created
first and the subscription uses it (``create_slot = false``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
from psycopg import sql as pgsql

from cdc.contracts.errors import SourceFatal
from cdc.contracts.source import SourceContext
from cdc.log.embedded import EmbeddedLog
from cdc.testing import wait_until
from connectors.postgres.snapshot.source import SnapshottingPostgresSource
from tests.integration.pg_source_kit import harness, query, sql


def _version(dsn: str) -> int:
    return int(query(dsn, "SHOW server_version_num")[0][0])


@pytest.fixture
def upstream(pg_server: Any) -> Iterator[str]:
    """A second database on the same server, the subscription's publisher."""
    name = f"up_{uuid.uuid4().hex[:12]}"
    pg_server.create_database(name)
    try:
        yield pg_server.dsn_for(dbname=name)
    finally:
        pg_server.drop_database(name)  # drops the subscription's slot too


@contextmanager
def subscribed(captured: str, upstream: str) -> Iterator[None]:
    """``public.t`` of ``upstream`` replicated into ``public.t`` of ``captured``."""
    slot = f"sub_{uuid.uuid4().hex[:12]}"
    sql(
        upstream,
        "CREATE TABLE t (id int PRIMARY KEY, who text)",
        "CREATE PUBLICATION up_pub FOR TABLE t",
    )
    query(upstream, "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')::text", (slot,))
    create = pgsql.SQL(
        "CREATE SUBSCRIPTION up_sub CONNECTION {} PUBLICATION up_pub"
        " WITH (create_slot = false, slot_name = {}, copy_data = false)"
    ).format(pgsql.Literal(upstream), pgsql.Literal(slot))
    with psycopg.connect(captured, autocommit=True) as conn:
        conn.execute(create)
    try:
        yield
    finally:
        # Detached from its slot first: DROP SUBSCRIPTION would otherwise drop it, and the
        # upstream database's teardown does that.
        sql(
            captured,
            "ALTER SUBSCRIPTION up_sub DISABLE",
            "ALTER SUBSCRIPTION up_sub SET (slot_name = NONE)",
            "DROP SUBSCRIPTION up_sub",
        )


def _capture(pg_db: str, upstream: str, tmp_path: Path, **options: Any) -> list[Any]:
    """What the source streams of ``public.t`` while the subscriber applies 1..3 from upstream
    and the captured database writes 100 and 101 itself: ``(id, op)`` in commit order."""
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY, who text)")
    with (
        subscribed(pg_db, upstream),
        harness(pg_db, tmp_path / "log", ["public.t"], **options) as h,
    ):
        h.open()
        sql(pg_db, "INSERT INTO t VALUES (100, 'local')")
        sql(upstream, *(f"INSERT INTO t VALUES ({i}, 'upstream')" for i in (1, 2, 3)))
        sql(upstream, "UPDATE t SET who = 'upstream again' WHERE id = 2")
        wait_until(
            lambda: {row[0] for row in query(pg_db, "SELECT id FROM t")} >= {1, 2, 3},
            30,
            0.1,
            describe="the subscriber to apply 1, 2, 3",
        )
        sql(pg_db, "INSERT INTO t VALUES (101, 'local')", "UPDATE t SET who = 'local' WHERE id = 3")
        # The last local write commits after everything applied: once it is in, all is.
        h.run_until(lambda: any(e.key == {"id": 3} and e.op == "u" for e in h.events))
        h.run_until(lambda: True, settle_s=0.5)
        return [(e.key["id"], e.op) for e in h.events]


def _needs_16(dsn: str) -> None:
    if _version(dsn) < 160000:
        pytest.skip("origin = none (source.skip_replicated) needs PostgreSQL 16 or later")


def test_skip_replicated_streams_local_writes_only(
    pg_db: str, upstream: str, tmp_path: Path
) -> None:
    _needs_16(pg_db)
    streamed = _capture(pg_db, upstream, tmp_path, skip_replicated=True)
    assert streamed == [(100, "c"), (101, "c"), (3, "u")]


def test_without_skip_replicated_the_applied_rows_are_streamed(
    pg_db: str, upstream: str, tmp_path: Path
) -> None:
    _needs_16(pg_db)  # (14 and 15 stream them too, but have no subscriber-origin option)
    streamed = _capture(pg_db, upstream, tmp_path)
    replicated = [(1, "c"), (2, "c"), (3, "c"), (2, "u")]
    assert streamed == [(100, "c"), *replicated, (101, "c"), (3, "u")]


def test_skip_replicated_before_16_stops_the_start_naming_the_version(
    pg_db: str, tmp_path: Path
) -> None:
    if _version(pg_db) >= 160000:
        pytest.skip("PostgreSQL 14 and 15 only: 16 and later have origin = none")
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY)")
    with harness(pg_db, tmp_path / "log", ["public.t"], skip_replicated=True) as h:
        with pytest.raises(SourceFatal, match="skip_replicated needs PostgreSQL 16 or later"):
            h.open()
        # Refused before the publication and the slot were made.
        slots = "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
        assert query(pg_db, slots)[0][0] == 0
        assert query(pg_db, "SELECT count(*) FROM pg_publication")[0][0] == 0
        # And before an initial snapshot: the snapshotting source checks first.
        log = EmbeddedLog(tmp_path / "snapshot-log")
        context = SourceContext(pipeline="pgt", log=log, logger=structlog.get_logger())
        snapshotting = SnapshottingPostgresSource(h.config, context)
        try:
            with pytest.raises(SourceFatal, match="skip_replicated needs PostgreSQL 16"):
                snapshotting.open({})
        finally:
            snapshotting.close()
            log.close()
        assert query(pg_db, slots)[0][0] == 0
