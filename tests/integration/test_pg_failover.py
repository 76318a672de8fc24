"""Failover slots (PostgreSQL 17+): ``source.slot_failover`` survives a primary failover.

A primary and a physical standby with ``sync_replication_slots = on``, both real servers; the
primary waits for the standby before its logical walsenders send anything
(``synchronized_standby_slots``). The pipeline streams from the primary through a multi-host DSN
with ``target_session_attrs=primary``. The standby stops (the primary then holds back what it
commits), the primary crashes, the standby is promoted; the pipeline follows it and resumes with
nothing lost, no transaction twice, and none the promoted standby never had.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from structlog.testing import capture_logs

from cdc.contracts.errors import SourceFatal
from cdc.testing import wait_until
from connectors.postgres.doctor.server import doctor
from tests.integration.pg_source_kit import harness
from tests.integration.pg_source_kit import sql as run_sql
from tests.integration.snapshot_kit import PIPELINE, execute, pipeline, table_state
from tests.integration.standby_kit import Pair, key_ops, primary_and_standby, require_major, writes
from tests.services.standby import require_synchronized_standby

#: A primary and a standby: CI runs these on 17 and 18 (make pytest-pg-versions).
pytestmark = pytest.mark.pgstandby

SLOT = f"{PIPELINE}_slot"


def _multi_host(pair: Pair) -> str:
    """Both servers in one DSN: libpq connects to whichever is the primary now."""
    p = pair.primary
    return (
        f"host={p.host},{pair.standby.host} port={p.port},{pair.standby.port} "
        f"user=postgres password={p.password} dbname={pair.database} "
        "target_session_attrs=primary"
    )


def _slot_row(dsn: str, slot: str) -> tuple[Any, ...] | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT failover, synced, active FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()


def _held_for_standby(dsn: str) -> bool:
    """Whether a walsender waits for the standby to confirm WAL before sending it on
    (synchronized_standby_slots): what was committed from there on is not sent yet."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE backend_type = 'walsender' AND wait_event = 'WaitForStandbyConfirmation'"
        ).fetchone()
    return row is not None and row[0] > 0


def test_failover_slot_resumes_on_the_promoted_standby(tmp_path: Path) -> None:
    require_major(17, "failover slots")
    with primary_and_standby(sync_slots=True) as pair:
        require_synchronized_standby(pair.primary, pair.standby.physical_slot)
        old, new = pair.primary_dsn, pair.standby_dsn
        execute(
            old,
            "CREATE TABLE t (id int PRIMARY KEY, v text)",
            "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 50) g",
        )
        options = {"slot_failover": True, "snapshot_chunk_rows": 20, "connect_timeout_s": 5}
        with (
            capture_logs() as logs,
            pipeline(_multi_host(pair), tmp_path / "log", ["public.t"], **options) as p,
        ):
            p.start()
            p.wait(lambda: p.snapshot_done() and bool(p.sources) and p.sources[-1].streaming)
            assert _slot_row(old, SLOT) == (True, False, True), "a failover slot, streaming"
            writes(old, range(51, 151), pause_s=0)
            p.wait(lambda: len(p.topic_state("public.t")) == 150)
            pair.standby.wait_synced(SLOT)
            writes(old, range(151, 201), pause_s=0)
            p.wait(lambda: len(p.topic_state("public.t")) == 200)
            # The standby goes away: what the primary commits now it never gets, and the
            # primary holds it back from the pipeline too (synchronized_standby_slots).
            pair.standby.stop()
            writes(old, range(201, 211), pause_s=0)
            wait_until(lambda: _held_for_standby(old), 30, describe="the primary to hold WAL back")
            assert len(p.topic_state("public.t")) == 200, "sent before the standby had it"
            pair.primary.kill()  # a crash: 201..210 are lost with it
            pair.standby.start()
            pair.standby.promote()
            assert not pair.standby.in_recovery()
            writes(new, range(301, 351))
            p.wait(lambda: p.topic_state("public.t") == table_state(new, "public.t"), 120)
            ops = key_ops(p, "public.t")
            assert _slot_row(new, SLOT) == (True, True, True), "the synced slot, streaming"
    expected = {k: ["r" if k <= 50 else "c"] for k in [*range(1, 201), *range(301, 351)]}
    assert ops == expected, "lost or duplicated"
    events = [e["event"] for e in logs]
    assert "source.retrying" in events  # it followed the promotion through the retries
    assert "slot.failover_unguarded" in events  # the promoted one has no standby of its own


def test_start_and_doctor_say_when_failover_is_incomplete(
    pg_db: str, pg_server: Any, tmp_path: Path
) -> None:
    require_major(17, "failover slots")
    run_sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY)")
    with harness(pg_db, tmp_path / "log", ["public.t"]) as h:
        h.open()  # an ordinary slot
        h.close()
        h.config = h.config.model_copy(update={"slot_failover": True})
        checks = {c.name: c for c in doctor(h.config, "pgt")}
        assert checks["slot pgt_slot: failover"].warning
        assert "ALTER_REPLICATION_SLOT" in str(checks["slot pgt_slot: failover"].fix)
        unguarded = checks["synchronized_standby_slots"]
        assert unguarded.warning and "empty" in unguarded.detail
        with capture_logs() as logs:
            h.open()  # makes it a failover slot, and warns
        h.close()
        assert [e["event"] for e in logs if e["event"].startswith("slot.failover")] == [
            "slot.failover_enabled",
            "slot.failover_unguarded",
        ]
        assert _slot_row(pg_db, "pgt_slot") == (True, False, False)
        assert "slot pgt_slot: failover" in {c.name for c in doctor(h.config, "pgt") if c.ok}
        _standby_slots_checks(pg_server, h.config)


def _standby_slots_checks(server: Any, config: Any) -> None:
    """``synchronized_standby_slots`` naming a slot no standby uses, then a dropped one."""
    server.execute("SELECT pg_create_physical_replication_slot('doctor_phys')")
    try:
        server.execute("ALTER SYSTEM SET synchronized_standby_slots = 'doctor_phys'")
        server.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)  # the reload reaches new backends at once; give the postmaster a moment
        [check] = [c for c in doctor(config, "pgt") if c.name == "synchronized_standby_slots"]
        assert check.warning and "no standby streams through it" in check.detail
        server.execute("SELECT pg_drop_replication_slot('doctor_phys')")
        [check] = [c for c in doctor(config, "pgt") if c.name == "synchronized_standby_slots"]
        assert not check.ok and "does not exist" in check.detail
    finally:
        server.execute("ALTER SYSTEM RESET synchronized_standby_slots")
        server.execute("SELECT pg_reload_conf()")
        with contextlib.suppress(psycopg.errors.UndefinedObject):
            server.execute("SELECT pg_drop_replication_slot('doctor_phys')")


def test_slot_failover_before_17_is_a_start_error(pg_db: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_db) as conn:
        version = conn.info.server_version
    if version >= 170000:
        pytest.skip("checks the error servers before PostgreSQL 17 give; this one is 17+")
    run_sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY)")
    with harness(pg_db, tmp_path / "log", ["public.t"], slot_failover=True) as h:
        [check] = [c for c in doctor(h.config, "pgt") if c.name == "slot failover"]
        assert not check.ok and "PostgreSQL 17" in check.detail
        major = version // 10000
        with pytest.raises(SourceFatal, match=f"needs PostgreSQL 17 or later.*PostgreSQL {major}"):
            h.open()
        h.close()
