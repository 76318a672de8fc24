"""A single-writer sink (DuckDB) with two workers on a real Kafka broker: one leads and applies,
the other is a standby in its log, in ``cdc status`` and in its metrics, opening nothing (not
even in the check of the sinks a first start of ``cdc run`` makes). The zombie case: a leader
paused past the session timeout loses the lease, and closes the file before the new leader opens
it. SIGKILL the leader and the standby takes over, and ``cdc verify`` finds the sink equal to the
PostgreSQL table.

Both workers share one DuckDB file on this host: the case a standby is for (DuckDB allows one
writing process per file, so two leaders at once would fail to open, not corrupt it).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.e2e.cli_helpers import cdc, cdc_env, http_get, start_run, status_json, stop, wait_for
from tests.services.ports import LOOPBACK, free_port

SINK = "warehouse"
CDC = (sys.executable, "-m", "cdc.cli.main")


def write_pipeline(tmp_path: Path, name: str, bootstrap: str) -> Path:
    path = tmp_path / "single.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{PG_DSN}}\n"
        "  tables: [public.accounts]\n  snapshot: initial\n  status_interval_s: 1\n"
        f"log:\n  type: kafka\n  bootstrap_servers: {bootstrap}\n  partitions: 3\n"
        # The broker's group.min.session.timeout.ms: the shortest lease Kafka grants.
        "  session_timeout_ms: 6000\n"
        f"sinks:\n  - name: {SINK}\n    type: duckdb\n    path: out/warehouse.duckdb\n"
    )
    return path


class Worker:
    """A ``cdc sink FILE warehouse`` process (``cdc run FILE`` with ``run``: the source and
    the sink in one process) with its own log file and metrics port."""

    def __init__(
        self, pipeline: Path, tmp_path: Path, env: dict[str, str], label: str, run: bool = False
    ) -> None:
        self.log = tmp_path / f"{label}.log"
        self.port = free_port()
        command = ("run", str(pipeline)) if run else ("sink", str(pipeline), SINK)
        self.process = subprocess.Popen(
            [*CDC, *command, "--metrics-listen", f"{LOOPBACK}:{self.port}"],
            cwd=tmp_path,
            env=cdc_env(env),
            stdout=self.log.open("a"),
            stderr=subprocess.STDOUT,
        )

    def events(self, name: str) -> list[dict[str, Any]]:
        """The log's ``name`` events (JSON lines: the log is not a terminal)."""
        found = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{") and f'"{name}"' in line:
                event = orjson.loads(line)
                if event.get("event") == name:
                    found.append(event)
        return found

    def wait_for(self, name: str, timeout: float = 60) -> dict[str, Any]:
        wait_for(lambda: self.events(name), timeout, 0.2, self.process, self.log)
        return self.events(name)[-1]

    def sink_state(self, pipeline: str) -> str | None:
        """The state ``cdc_sink_state`` says is 1."""
        status, body = http_get(f"http://{LOOPBACK}:{self.port}/metrics")
        if status != 200:
            return None
        prefix = f'cdc_sink_state{{pipeline="{pipeline}",sink="{SINK}",state="'
        for line in body.decode().splitlines():
            if line.startswith(prefix) and line.endswith(" 1.0"):
                return line[len(prefix) :].split('"', 1)[0]
        return None


def status(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> dict[str, Any]:
    [sink] = status_json(pipeline, tmp_path, env)["sinks"]
    return dict(sink)


def update(dsn: str, first: int, count: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(first, first + count):
            conn.execute("UPDATE accounts SET balance = %s WHERE id = %s", (i, i % 300))
            if i % 7 == 0:
                conn.execute("DELETE FROM accounts WHERE id = %s", (1000 + i,))


def verified(tmp_path: Path, pipeline: Path, env: dict[str, str], seen: dict[str, Any]) -> bool:
    result = cdc("verify", str(pipeline), "--sink", SINK, "--json", cwd=tmp_path, env=env)
    seen["verify"] = result.stdout[-2000:] + result.stderr[-2000:]
    return result.returncode == 0


@dataclass
class Setup:
    """A running source, the pipeline's name and file, and its workers (stopped at the end)."""

    name: str
    pipeline: Path
    env: dict[str, str]
    tmp_path: Path
    workers: list[Worker] = field(default_factory=list)
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def worker(self, label: str, run: bool = False) -> Worker:
        self.workers.append(Worker(self.pipeline, self.tmp_path, self.env, label, run))
        return self.workers[-1]

    def source(self) -> None:
        """``cdc run --role source``, stopped at the end like the workers."""
        self.processes.append(start_run(self.pipeline, self.tmp_path, self.env, "--role", "source"))

    def verify(self, worker: Worker) -> None:
        """``cdc verify`` finds the sink equal to the table (waiting while it lags)."""
        seen: dict[str, Any] = {}
        check = partial(verified, self.tmp_path, self.pipeline, self.env, seen)
        wait_for(check, 90, 1.0, worker.process, worker.log, seen)


@pytest.fixture
def setup(pg_db: str, kafka_server: Any, tmp_path: Path) -> Iterator[Setup]:
    name = f"sw{uuid.uuid4().hex[:8]}"
    env = {"PG_DSN": pg_db}
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, note text, balance int)")
        conn.execute("INSERT INTO accounts SELECT i, 'n' || i, 0 FROM generate_series(0, 1999) i")
    pipeline = write_pipeline(tmp_path, name, kafka_server.bootstrap_servers)
    found = Setup(name, pipeline, env, tmp_path)
    try:
        yield found
    finally:
        running = [*found.processes, *(w.process for w in found.workers)]
        for process in running:  # all asked at once: they stop side by side
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)  # a paused one would not see the SIGTERM
                process.send_signal(signal.SIGTERM)
        for process in running:
            process.wait(20)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def leader_and_standby(setup: Setup) -> tuple[Worker, Worker]:
    """The first worker (``cdc sink``) leads: it opened the store before the source ever ran.
    The second one is ``cdc run``, the source too, started at the pipeline's first start: it
    stands by, and its check of the sinks (before the source creates anything) must not open
    the store the lease gives to another worker."""
    first = setup.worker("first")
    first.wait_for("sink.opened")
    assert first.events("sink.leading")
    second = setup.worker("second", run=True)
    standby = second.wait_for("sink.standby")
    assert f"-{first.process.pid} at " in standby["leader"]
    assert not second.events("preflight.sink_unavailable"), "a standby opened the store"
    return first, second


def stands_by(setup: Setup, leader: Worker, standby: Worker) -> None:
    """A state of its own in the standby's metrics, ready, no store opened, roles in status."""
    name, pipeline, env, tmp_path = setup.name, setup.pipeline, setup.env, setup.tmp_path
    wait_for(lambda: standby.sink_state(name) == "standby", 30, 0.2, standby.process)
    assert leader.sink_state(name) == "running"
    assert http_get(f"http://{LOOPBACK}:{standby.port}/readyz")[0] == 200
    workers = status(tmp_path, pipeline, env)["workers"]
    assert workers["leader"]["client_id"].endswith(f"-{leader.process.pid}")
    [waiting] = workers["standbys"]
    assert waiting["client_id"].endswith(f"-{standby.process.pid}")
    text = cdc("status", str(pipeline), cwd=tmp_path, env=env).stdout
    assert f"single writer: leader {workers['leader']['client_id']}" in text
    assert f"1 standby: {waiting['client_id']}" in text
    assert not standby.events("sink.opened"), "a standby opened the store"


def paused_leader_closes_before_the_new_one_opens(
    pg_db: str, leader: Worker, standby: Worker
) -> None:
    """The zombie case: the leader is paused past ``session_timeout_ms``, so the group gives
    the lease to the standby while the old leader still holds the DuckDB file. The new leader
    retries its open (the file's lock is the fence); once resumed, the old one learns it lost
    the lease, closes the file and stands by, and only then does the new one open it."""
    leader.process.send_signal(signal.SIGSTOP)
    standby.wait_for("sink.leading", timeout=60)
    standby.wait_for("sink.unavailable", timeout=30)  # the paused leader holds the file's lock
    update(pg_db, 200, 200)
    assert not standby.events("sink.opened")
    leader.process.send_signal(signal.SIGCONT)
    lost = leader.wait_for("sink.lease_lost", timeout=30)
    opened = standby.wait_for("sink.opened", timeout=60)
    assert opened["timestamp"] > lost["timestamp"], "the new leader opened before the old closed"

    def stood_by() -> bool:
        return any(e["timestamp"] > lost["timestamp"] for e in leader.events("sink.standby"))

    wait_for(stood_by, 30, 0.2, leader.process, leader.log)
    assert f"-{standby.process.pid} at " in leader.events("sink.standby")[-1]["leader"]


def test_standby_takeovers_of_a_paused_and_of_a_killed_leader(setup: Setup, pg_db: str) -> None:
    """One pipeline for both takeovers (its setup is most of the time): ``first`` leads and
    ``second`` (the source too) stands by; ``first`` is paused and ``second`` takes over; then
    ``second`` is killed mid-stream and ``first`` takes over again, while a new source resumes
    from its slot; ``cdc verify`` finds the sink equal to the table."""
    first, second = leader_and_standby(setup)
    update(pg_db, 0, 200)
    stands_by(setup, first, second)
    paused_leader_closes_before_the_new_one_opens(pg_db, first, second)

    # The leader dies mid-stream (and the source with it); the standby takes over.
    stop(second.process, signal.SIGKILL)
    setup.source()
    update(pg_db, 400, 200)
    wait_for(lambda: len(first.events("sink.opened")) == 2, 60, 0.2, first.process, first.log)
    assert len(first.events("sink.leading")) == 2
    setup.verify(first)
    wait_for(lambda: first.sink_state(setup.name) == "running", 30, 0.2, first.process)
    leader = status(setup.tmp_path, setup.pipeline, setup.env)["workers"]["leader"]
    assert leader["client_id"].endswith(f"-{first.process.pid}")
    assert stop(first.process, signal.SIGTERM, 20)[0] == 0, first.log.read_text()[-3000:]
