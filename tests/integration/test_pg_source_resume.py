"""Positions: restart without gap or duplicate, idle flush advance, a server restart
mid-stream, and bad values under both policies."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.contracts.errors import Retriable, SourceUnavailable
from tests.integration.pg_source_kit import Harness, harness, query, slot_flush, sql


def _ids(h: Harness) -> list[int]:
    return [e.key["id"] for e in h.events if e.after is not None]


@pytest.mark.pgcore
def test_restart_gives_no_gap_and_no_duplicate(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY)")
    with harness(pg_db, tmp_path / "log", ["public.t"], max_batch_events=100) as h:
        h.open()
        for i in range(5):  # five committed transactions of 10 rows
            sql(
                pg_db, f"INSERT INTO t SELECT g FROM generate_series({i * 10 + 1}, {i * 10 + 10}) g"
            )
        h.collect(20)  # some of them reached the log
        h.close()  # a stop: the rest was never committed to the log
        stored = h.log.source_offsets()["postgres"]["lsn"]
        sql(pg_db, "INSERT INTO t SELECT g FROM generate_series(51, 300) g")  # a large one
        source = h.open()
        batch = source.poll(100, 5.0)  # a piece of the first transaction after the stored one
        assert batch.events and min(e.source.position for e in batch.events) > stored
        h.close()  # dropped mid-transaction: never committed, never acked
        h.open()
        h.run_until(lambda: len(set(_log_ids(h))) >= 300, settle_s=1.0)
        assert sorted(_log_ids(h)) == list(range(1, 301)), "gap or duplicate in the log"


def _log_ids(h: Harness) -> list[int]:
    records = h.log.read("pgt.public.t", 0, 0, 100_000)
    return [orjson.loads(r.key or b"{}")["id"] for r in records if r.value is not None]


FLUSH_ADVANCES = 5


def test_idle_pipeline_flush_follows_other_tables(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, "CREATE TABLE captured (id int PRIMARY KEY)", "CREATE TABLE other (v text)")
    with harness(pg_db, tmp_path / "log", ["public.captured"], status_interval_s=1.0) as h:
        h.open()
        h.run_until(lambda: True, settle_s=1.5)
        start = slot_flush(pg_db)
        samples = [start]
        # Other tables' WAL keeps coming until the slot has followed it five times over (one
        # status interval each, so some seconds); a minute without that is the failure.
        deadline = time.monotonic() + 60
        while len(set(samples)) <= FLUSH_ADVANCES and time.monotonic() < deadline:
            sql(pg_db, "INSERT INTO other SELECT repeat('x', 100) FROM generate_series(1, 200)")
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                h.step(0.1)
            samples.append(slot_flush(pg_db))
        [(current,)] = query(pg_db, "SELECT (pg_current_wal_lsn() - '0/0')::int8")
        assert not h.events, "nothing of the captured table changed"
        assert len(set(samples)) > FLUSH_ADVANCES, f"the slot advanced only {samples}"
        assert samples[-1] > start and samples == sorted(samples)
        assert current - samples[-1] < 2_000_000, "the slot lags far behind the WAL"
        assert h.commits and all(c["postgres"]["lsn"] > 0 for c in h.commits)


@pytest.mark.pgcore
def test_server_restart_mid_stream_loses_nothing(
    pg_db: str, pg_server: Any, tmp_path: Path
) -> None:
    if not pg_server.supports_restart:
        pytest.skip("server given by address: cannot restart it")
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY)")
    stop = threading.Event()
    written: list[int] = []

    def writer() -> None:
        n = 0
        while not stop.is_set():
            try:
                sql(pg_db, f"INSERT INTO t VALUES ({n + 1})")
                n += 1
                written.append(n)
            except Exception:
                time.sleep(0.2)  # the server is restarting
            time.sleep(0.005)

    with harness(pg_db, tmp_path / "log", ["public.t"]) as h:
        h.open()
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            _stream_through_restart(h, pg_server, lambda: len(written))
        finally:
            stop.set()
            thread.join()
        h.run_until(lambda: set(_log_ids(h)) >= set(written), timeout_s=60)
        assert sorted(_log_ids(h)) == sorted(set(_log_ids(h))), "duplicate in the log"
        assert set(_log_ids(h)) == set(written)


def _stream_through_restart(h: Harness, pg_server: Any, count: Any) -> None:
    """Step while the server restarts; on a retriable error reopen like the runtime does."""
    restarted = False
    reconnects = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not restarted or count() < 400):
        if not restarted and count() >= 150:
            # In a thread: a fast shutdown waits until the walsender's client confirmed what
            # it was sent, so the source must keep polling meanwhile (as the runtime does).
            threading.Thread(target=pg_server.restart).start()
            restarted = True
        try:
            if h.source is None:
                h.open()
            h.step()
        except SourceUnavailable as exc:
            assert isinstance(exc, Retriable)
            reconnects += 1
            h.close()
            time.sleep(0.2)
    assert restarted and reconnects >= 1


def test_json_no_double_holds_is_written_as_its_text(pg_db: str, tmp_path: Path) -> None:
    # This value was once a conversion failure (a dead letter, or the source failing): json is
    # now Debezium's io.debezium.data.Json, a string of the server's text, so every valid json
    # value is written. A value a converter rejects is still a dead letter or a failure: see
    # tests/unit/test_pg_stream.py::test_bad_value_fails_or_becomes_a_dead_letter.
    sql(pg_db, "CREATE TABLE j (id int PRIMARY KEY, doc json)")
    with harness(pg_db, tmp_path / "log", ["public.j"], on_bad_record="fail") as h:
        h.open()
        sql(pg_db, """INSERT INTO j VALUES (1, '{"a": 1e999}'), (2, '{"a": 1}')""")
        events = h.collect(2)
        assert [(e.key, e.after) for e in events] == [
            ({"id": 1}, {"id": 1, "doc": '{"a": 1e999}'}),
            ({"id": 2}, {"id": 2, "doc": '{"a": 1}'}),
        ]
        assert not h.dead


@pytest.mark.pgcore
def test_source_sequence_resumes_the_last_commit_after_a_restart(
    pg_db: str, tmp_path: Path
) -> None:
    """``source.sequence``'s first LSN is the end of the last commit, across a restart too
    (Debezium keeps it in its offsets as ``lsn_commit``): null only on the very first change."""
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY)")
    with harness(pg_db, tmp_path / "log", ["public.t"]) as h:
        h.open()
        sql(pg_db, "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)")
        first, second = h.collect(2)
        assert orjson.loads(first.source.order or "")[0] is None
        h.close()
        stored = h.log.source_offsets()["postgres"]
        assert stored["lsn_commit"] == stored["lsn"]  # the second commit's end
        # the second change's last commit is the first's end
        assert int(orjson.loads(second.source.order or "")[0]) < stored["lsn_commit"]
        sql(pg_db, "INSERT INTO t VALUES (3)")
        h.open()
        third = h.collect(3)[-1]
        assert third.key == {"id": 3}
        last_commit, lsn = orjson.loads(third.source.order or "")
        assert int(last_commit) == stored["lsn_commit"] and int(lsn) == third.source.extra["lsn"]
