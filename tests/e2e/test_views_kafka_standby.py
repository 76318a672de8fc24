"""A live join view with two ``cdc run`` processes of one Kafka pipeline: one holds the view's
lease and runs it, the other stands by (``cdc status`` says so), opening neither the view's
store nor its consumer group. SIGKILL the one that runs it and the other takes over, rebuilding
its own store from the view's state topic (each process has its own state directory, as on two
machines); after more writes the view topic and the Redis sink still equal the source's join.

The same holds when the holder is paused (SIGSTOP) instead of killed, mid-workload, past its
lease: the standby takes the view over while the paused one still believes it holds it, and the
paused one, woken (SIGCONT), must not commit what it had in hand: the standby claimed the view's
transactional id, which fenced it.

Without the lease both processes' view tasks joined the view's consumer group and split its
partitions, each applying part of the changes to its own store: the survivor's store missed what
the other applied meanwhile, and the documents it wrote after the kill missed those rows.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import psycopg

from tests.e2e.cli_helpers import cdc, cdc_env, status_json, stop, wait_for
from tests.e2e.views_kit import ViewReader, Workload, cached, setup, source_join, write_pipeline

CDC = (sys.executable, "-m", "cdc.cli.main")


class Run:
    """A ``cdc run`` of the pipeline in a directory of its own (its own local state: the view's
    store), logging to ``<dir>/run.log``."""

    def __init__(self, pipeline: Path, directory: Path) -> None:
        directory.mkdir()
        self.log = directory / "run.log"
        self.process = subprocess.Popen(
            [*CDC, "run", str(pipeline)],
            cwd=directory,
            stdout=self.log.open("a"),
            stderr=subprocess.STDOUT,
            env=cdc_env(None),
        )

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{") and f'"{name}"' in line:
                event = orjson.loads(line)
                if event.get("event") == name:
                    found.append(event)
        return found

    def wait_for(self, name: str, timeout: float = 90) -> dict[str, Any]:
        wait_for(lambda: self.events(name), timeout, 0.2, self.process, self.log)
        return self.events(name)[-1]

    def wait_for_view(self, timeout: float = 90) -> None:
        """Until the view's task stands by or runs (a standby may go straight to running once
        the holder's membership expired before the group showed it as the holder)."""

        def seen() -> bool:
            return bool(self.events("view.standby") or self.events("view.started"))

        wait_for(seen, timeout, 0.1, self.process, self.log)


class Scene:
    """One test's pipeline on Kafka (a short session timeout, so a lost holder is seen soon),
    its view's reader, a workload, and the ``cdc run`` processes started so far."""

    def __init__(
        self, prefix: str, seed: int, pg_db: str, redis_url: str, kafka: Any, tmp_path: Path
    ) -> None:
        self.name, self.pg_db, self.redis_url = f"{prefix}_{uuid.uuid4().hex[:8]}", pg_db, redis_url
        self.tmp_path = tmp_path
        setup(pg_db, customers=30, orders=80, items=200)
        log = (
            f"{{type: kafka, bootstrap_servers: '{kafka.bootstrap_servers}', partitions: 3,"
            " session_timeout_ms: 6000}"
        )
        self.pipeline = write_pipeline(tmp_path, pg_db, redis_url, self.name, log, False)
        self.reader = ViewReader(self.pipeline)
        self.workload = Workload(pg_db, seed=seed)
        self.runs: list[Run] = []

    def run(self, directory: str) -> Run:
        self.runs.append(Run(self.pipeline, self.tmp_path / directory))
        return self.runs[-1]

    def first_runs_the_view(self) -> Run:
        """``first`` started, running the view, the workload going and 200 documents out."""
        first = self.run("first")
        first.wait_for("view.started")
        self.workload.start()
        wait_for(lambda: len(self.reader.records()) > 200, 120, 0.2, first.process, first.log)
        return first

    def stop_workload(self) -> None:
        self.workload.stop_event.set()
        self.workload.join(30)

    def converged(self, survivor: Run, seen: dict[str, Any]) -> None:
        """The view topic and Redis equal the source's join (waiting while they catch up)."""

        def met() -> bool:
            expected = source_join(self.pg_db, self.reader.config.views[0])
            docs = self.reader.documents()
            seen.update(expected=len(expected), topic=len(docs))
            cache = cached(self.pipeline, self.redis_url, self.name)
            return docs == expected and cache == expected

        wait_for(met, 240, 1.0, survivor.process, survivor.log, seen)

    def stop_runs(self) -> list[int]:
        """SIGTERM every run still going; their exit codes."""
        return [
            stop(r.process, signal.SIGTERM, 30)[0] for r in self.runs if r.process.poll() is None
        ]

    def drop(self) -> None:
        cdc("drop", str(self.pipeline), "--yes", cwd=self.tmp_path)


def test_a_standby_takes_over_the_view_of_a_killed_process(
    pg_db: str, redis_server: Any, kafka_server: Any, tmp_path: Path
) -> None:
    """``first`` runs the view; ``second`` starts and stands by, then ``first`` is killed and
    ``second`` runs the view, never beside ``first``. The workload pauses while ``second``
    starts: a pipeline's source has one writer, and ``second``'s fences ``first``'s, whose next
    commit would fail and stop it (here the kill stops it; ``second``'s source waits for the
    replication slot meanwhile)."""
    scene = Scene("kvsb", 23, pg_db, redis_server.url, kafka_server, tmp_path)
    workload = scene.workload
    try:
        first = scene.first_runs_the_view()
        workload.paused.set()
        second = scene.run("second")
        second.wait_for_view()
        killed_at = _utc_now()
        stop(first.process, signal.SIGKILL)
        started = second.wait_for("view.started")
        written = workload.count
        workload.paused.clear()
        wait_for(lambda: workload.count > written + 400, 120, 0.1, second.process, second.log)
    finally:
        scene.stop_workload()
    # One process ran the view at a time: the second's began once the first was killed.
    assert started["timestamp"] > killed_at, (started, killed_at)
    [standby] = second.events("view.standby")
    assert f"-{first.process.pid} at " in standby["leader"]
    try:
        scene.converged(second, {})
        [state] = status_json(scene.pipeline, tmp_path)["views"]
        assert state["state"] == "running" and state["standbys"] == [], state
    finally:
        assert scene.stop_runs() == [0]
    scene.drop()


def test_a_paused_view_holder_is_fenced_when_it_wakes_and_the_view_stays_whole(
    pg_db: str, redis_server: Any, kafka_server: Any, tmp_path: Path
) -> None:
    """``first`` runs the source and the view; it is paused (SIGSTOP) mid-workload, so it may
    hold a view batch in an open transaction. ``second`` starts (its source fences ``first``'s)
    and stands by until ``first``'s session times out, then runs the view, and its source takes
    the slot once ``first``'s replication connection is ended, as a network partition would (a
    paused client holds its slot until the server's ``wal_sender_timeout``). Then ``first``
    wakes: its view must not commit what it had in hand (its term is over: the lease is gone and
    ``second`` claimed the view's transactional id) and never runs again beside ``second``; the
    view topic and the Redis sink equal the source's join. (Whether ``first`` was mid-batch at
    the pause is up to timing: ``tests/integration/test_views_kafka_fence.py`` forces it.)"""
    scene = Scene("kvsp", 29, pg_db, redis_server.url, kafka_server, tmp_path)
    reader = scene.reader
    first: Run | None = None
    try:
        first = scene.first_runs_the_view()
        written = len(reader.records())
        wait_for(lambda: len(reader.records()) > written + 50, 60, 0.02, first.process, first.log)
        first.process.send_signal(signal.SIGSTOP)
        paused_at = _utc_now()
        second = scene.run("second")
        # Standing by while first's membership lasts (or, if the group's rebalance hid first
        # as the holder, straight to running once it expired).
        second.wait_for_view()
        _end_replication_of(pg_db, f"{scene.name}_slot")
        started = second.wait_for("view.started")
        written = len(reader.records())
        wait_for(
            lambda: len(reader.records()) > written + 100, 120, 0.1, second.process, second.log
        )
        # No write after first wakes: a batch it committed then, from before its pause, would
        # be the last word on its documents, and the join below would show it.
        scene.stop_workload()
        first.process.send_signal(signal.SIGCONT)
        # Woken, its view's term ends (the lease is gone, a commit in hand fenced), or the
        # process stops first (its source was fenced); it never runs the view again.
        wait_for(
            lambda: (
                first.process.poll() is not None
                or first.events("view.lease_lost")
                or first.events("view.fenced")
            ),
            60,
            0.1,
        )
    finally:
        scene.stop_workload()
        if first is not None and first.process.poll() is None:
            first.process.send_signal(signal.SIGCONT)  # a failed wait must not leave it paused
    assert started["timestamp"] > paused_at, (started, paused_at)
    try:
        scene.converged(second, {})
    finally:
        scene.stop_runs()
    assert len(first.events("view.started")) == 1, first.events("view.started")
    scene.drop()


def _end_replication_of(dsn: str, slot: str) -> None:
    """End the walsender serving ``slot``, as the server does once a paused client misses its
    ``wal_sender_timeout`` (a minute by default; this test's server is shared, so it is not
    lowered)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
            " WHERE slot_name = %s AND active_pid IS NOT NULL",
            (slot,),
        ).fetchall()
    assert ended == [(True,)], ended


def _utc_now() -> str:
    """Now as the log's timestamps say it (ISO 8601, UTC, compared as text)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
