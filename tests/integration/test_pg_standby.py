"""Decoding on a hot standby (PostgreSQL 16+): a primary and a physical standby, both real
servers; the pipeline's source.dsn points at the standby, the writes go to the primary.

The slot and the exported snapshot live on the standby; what the source would write (the
publication, heartbeats, snapshot watermarks) is the primary's job there, and each says so.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from structlog.testing import capture_logs

from cdc.contracts.errors import SourceFatal
from cdc.testing import wait_until
from connectors.postgres.doctor.server import doctor
from connectors.postgres.snapshot.signal import request_snapshot
from tests.integration.pg_source_kit import harness
from tests.integration.snapshot_kit import PIPELINE, execute, pipeline, table_state
from tests.integration.standby_kit import (
    Pair,
    key_ops,
    pair_fixture,
    primary_and_standby,
    slots,
    writes,
)
from tests.services.pg_binaries import find_bin_dir
from tests.services.standby import server_major

#: A primary and a standby: CI runs these on 17 and 18 (make pytest-pg-versions).
pytestmark = pytest.mark.pgstandby

SLOT = f"{PIPELINE}_slot"


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    """A primary and its hot standby, PostgreSQL 16+."""
    yield from pair_fixture(16, "logical decoding on a standby")


def test_snapshot_and_stream_from_standby_through_its_restart(pair: Pair, tmp_path: Path) -> None:
    pair.new_database()
    primary, standby = pair.primary_dsn, pair.standby_dsn
    execute(
        primary,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 300) g",
        f"CREATE PUBLICATION {PIPELINE}_pub FOR TABLE t",  # a standby cannot create it
    )
    pair.standby.wait_replayed()
    options = {"snapshot_chunk_rows": 100, "heartbeat_interval_s": 0.5}
    with capture_logs() as logs, pipeline(standby, tmp_path / "log", ["public.t"], **options) as p:
        p.start()
        p.wait(lambda: p.snapshot_done() and bool(p.sources) and p.sources[-1].streaming)
        assert slots(standby) == [SLOT] and SLOT not in slots(primary)
        writer = threading.Thread(target=writes, args=(primary, range(301, 501)))
        writer.start()
        p.wait(lambda: len(p.topic_state("public.t")) > 300)  # some of them streamed...
        pair.standby.restart()  # ...then the standby goes down mid-stream, and comes back
        writer.join()
        execute(
            primary, "UPDATE t SET v = 'u' WHERE id <= 10 OR id > 490", "DELETE FROM t WHERE id = 5"
        )
        pair.standby.wait_replayed()
        p.wait(lambda: p.topic_state("public.t") == table_state(primary, "public.t"), 120)
        ops = key_ops(p, "public.t")
    updated = set(range(1, 11)) | set(range(491, 501))
    expected = {
        k: ["r" if k <= 300 else "c"] + (["u"] if k in updated else []) for k in range(1, 501)
    }
    expected[5] += ["d", "-"]
    assert ops == expected, "a change was lost or duplicated"
    events = [e["event"] for e in logs]
    assert "heartbeat.disabled" in events and "source.retrying" in events


def test_standby_refuses_what_it_cannot_write(pair: Pair, tmp_path: Path) -> None:
    """No publication: a clear error naming the primary; doctor says the same; a snapshot
    request (a write) is refused with the reason; a failover slot on a standby is refused."""
    pair.new_database()
    primary, standby = pair.primary_dsn, pair.standby_dsn
    execute(primary, "CREATE TABLE t (id int PRIMARY KEY)")
    pair.standby.wait_replayed()
    with harness(standby, tmp_path / "a", ["public.t"]) as h:
        checks = {c.name: c for c in doctor(h.config, "pgt")}
        assert checks["standby"].ok and not checks["standby"].warning, checks["standby"]
        publication = checks["publication pgt_pub"]
        assert not publication.ok and "run on the primary: CREATE PUBLICATION" in str(
            publication.fix
        )
        with pytest.raises(
            SourceFatal,
            match=r"CREATE PUBLICATION.*hot standby, which is read-only.*on the primary",
        ):
            h.open()
        h.close()
    execute(primary, "CREATE PUBLICATION pgt_pub FOR TABLE t")
    pair.standby.wait_replayed()
    with harness(standby, tmp_path / "b", ["public.t"], slot_failover=True) as h:
        with pytest.raises(SourceFatal, match="only a primary's slots failover slots"):
            h.open()
        h.close()
        with pytest.raises(SourceFatal, match="read-only"):
            request_snapshot(h.config, "pgt", "public.t", None)


def test_standby_without_feedback_is_refused(pair: Pair, tmp_path: Path) -> None:
    pair.new_database()
    primary, standby = pair.primary_dsn, pair.standby_dsn
    execute(
        primary, "CREATE TABLE t (id int PRIMARY KEY)", "CREATE PUBLICATION pgt_pub FOR TABLE t"
    )
    pair.standby.wait_replayed()
    _feedback(pair, "off")
    try:
        with harness(standby, tmp_path / "log", ["public.t"]) as h:
            checks = {c.name: c for c in doctor(h.config, "pgt")}
            assert not checks["standby"].ok and "hot_standby_feedback" in checks["standby"].fix
            with pytest.raises(SourceFatal, match="hot_standby_feedback is off"):
                h.open()
            h.close()
            assert "pgt_slot" not in slots(standby)
    finally:
        _feedback(pair, "on")


def _feedback(pair: Pair, value: str) -> None:
    pair.standby.execute(f"ALTER SYSTEM SET hot_standby_feedback = {value}")  # test-only SQL
    pair.standby.execute("SELECT pg_reload_conf()")
    wait_until(lambda: _setting(pair.standby_dsn) == value, 10, describe="the reload to apply")


def _setting(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SHOW hot_standby_feedback").fetchone()
    return str(row[0]) if row else ""


def test_a_standby_before_16_is_refused(tmp_path: Path) -> None:
    """Before PostgreSQL 16 a standby cannot decode: the start says so, naming the version."""
    bin_dir = find_bin_dir()
    if bin_dir is None or server_major(bin_dir) >= 16:
        pytest.skip("checks the error a standby before PostgreSQL 16 gives; this one is 16+")
    with primary_and_standby() as pair:
        execute(pair.primary_dsn, "CREATE TABLE t (id int PRIMARY KEY)")
        execute(pair.primary_dsn, "CREATE PUBLICATION pgt_pub FOR TABLE t")
        pair.standby.wait_replayed()
        with harness(pair.standby_dsn, tmp_path / "log", ["public.t"]) as h:
            [check] = [c for c in doctor(h.config, "pgt") if c.name == "standby"]
            assert not check.ok and "before 16" in check.detail
            with pytest.raises(SourceFatal, match="needs PostgreSQL 16 or later"):
                h.open()
            h.close()
