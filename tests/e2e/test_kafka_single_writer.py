"""A single-writer sink (DuckDB) with two ``cdc sink`` workers on a real Kafka broker: one leads
and applies, the other is a standby in its log, in ``cdc status`` and in its metrics, opening
nothing; SIGKILL the leader and the standby takes over, and ``cdc verify`` finds the sink equal
to the PostgreSQL table. And the zombie case: a leader paused past the session timeout loses the
lease, and closes the file before the new leader opens it.

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

from tests.e2e.cli_helpers import cdc, cdc_env, http_get, start_run, stop, wait_for
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
    result = cdc("status", str(pipeline), "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    [sink] = orjson.loads(result.stdout)["sinks"]
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
        for process in [*found.processes, *(w.process for w in found.workers)]:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)  # a paused one would not see the SIGTERM
                stop(process, signal.SIGTERM, 20)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def leader_and_standby(setup: Setup, run: bool = False) -> tuple[Worker, Worker]:
    """The first worker leads (it opened the store); the second one (``cdc run``: the source
    too, at its first start) stands by."""
    first = setup.worker("first")
    first.wait_for("sink.opened")
    assert first.events("sink.leading")
    second = setup.worker("second", run)
    standby = second.wait_for("sink.standby")
    assert f"-{first.process.pid} at " in standby["leader"]
    return first, second


def test_a_standby_stands_by_then_takes_over_when_the_leader_is_killed(
    setup: Setup, pg_db: str
) -> None:
    name, pipeline, env, tmp_path = setup.name, setup.pipeline, setup.env, setup.tmp_path
    setup.source()
    first, second = leader_and_standby(setup)
    update(pg_db, 0, 300)

    # The standby: a state of its own in the metrics, no store opened, the roles in status.
    wait_for(lambda: second.sink_state(name) == "standby", 30, 0.2, second.process)
    assert first.sink_state(name) == "running"
    assert http_get(f"http://{LOOPBACK}:{second.port}/readyz")[0] == 200
    workers = status(tmp_path, pipeline, env)["workers"]
    assert workers["leader"]["client_id"].endswith(f"-{first.process.pid}")
    [waiting] = workers["standbys"]
    assert waiting["client_id"].endswith(f"-{second.process.pid}")
    text = cdc("status", str(pipeline), cwd=tmp_path, env=env).stdout
    assert f"single writer: leader {workers['leader']['client_id']}" in text
    assert f"1 standby: {waiting['client_id']}" in text
    assert not second.events("sink.opened"), "a standby opened the store"

    # The leader dies mid-stream; the standby takes over and applies the rest.
    stop(first.process, signal.SIGKILL)
    update(pg_db, 300, 300)
    second.wait_for("sink.opened", timeout=60)
    assert second.events("sink.leading")
    setup.verify(second)
    wait_for(lambda: second.sink_state(name) == "running", 30, 0.2, second.process)
    leader = status(tmp_path, pipeline, env)["workers"]["leader"]
    assert leader["client_id"].endswith(f"-{second.process.pid}")
    assert stop(second.process, signal.SIGTERM, 20)[0] == 0, second.log.read_text()[-3000:]


def test_a_paused_leader_loses_the_lease_and_closes_before_the_new_one_opens(
    setup: Setup, pg_db: str
) -> None:
    """The zombie case: the leader is paused past ``session_timeout_ms``, so the group gives
    the lease to the standby while the old leader still holds the DuckDB file. The new leader
    retries its open (the file's lock is the fence); once resumed, the old one learns it lost
    the lease, closes the file and stands by, and only then does the new one open it.

    The standby is ``cdc run`` (the source too) started at the pipeline's first start, whose
    check of the sinks must not open a store the lease gives to another worker."""
    first, second = leader_and_standby(setup, run=True)
    assert not second.events("preflight.sink_unavailable"), "a standby opened the store"
    update(pg_db, 0, 200)
    first.process.send_signal(signal.SIGSTOP)
    second.wait_for("sink.leading", timeout=60)
    second.wait_for("sink.unavailable", timeout=30)  # the paused leader holds the file's lock
    update(pg_db, 200, 200)
    assert not second.events("sink.opened")
    first.process.send_signal(signal.SIGCONT)
    lost = first.wait_for("sink.lease_lost", timeout=30)
    opened = second.wait_for("sink.opened", timeout=60)
    assert opened["timestamp"] > lost["timestamp"], "the new leader opened before the old closed"

    def stands_by() -> bool:
        return any(e["timestamp"] > lost["timestamp"] for e in first.events("sink.standby"))

    wait_for(stands_by, 30, 0.2, first.process, first.log)
    assert f"-{second.process.pid} at " in first.events("sink.standby")[-1]["leader"]
    setup.verify(second)
    workers = status(setup.tmp_path, setup.pipeline, setup.env)["workers"]
    assert workers["leader"]["client_id"].endswith(f"-{second.process.pid}")
    [waiting] = workers["standbys"]
    assert waiting["client_id"].endswith(f"-{first.process.pid}")
