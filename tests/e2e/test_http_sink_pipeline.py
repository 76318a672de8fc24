"""PostgreSQL to a webhook through the CLI: ``cdc run`` with an ``http`` sink POSTing to a real
receiver in the test process (:mod:`tests.integration.webhook_receiver`, which verifies every
signature with the documented code and applies records by position, as the docs tell a receiver
to), a random workload, faults on the receiver's side, and two SIGKILLs of ``cdc run``
mid-work. Afterwards the receiver equals the table row by row, every record that came more than
once came under the same id with the same content, and ``cdc verify`` reports the sink NOT
VERIFIABLE (a webhook cannot be read back) instead of failing otherwise.
"""

from __future__ import annotations

import random
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.e2e.cli_helpers import cdc, start_run, status_json, stop, topic_records, wait_for
from tests.integration.webhook_receiver import Receiver

SECRET = "whsec_ZTJlLWh0dHAtc2luay1zZWNyZXQta2V5"
TOPIC = "hooks.public.items"


class Writer(threading.Thread):
    """Random inserts, updates and deletes of ``public.items`` until stopped."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rng = dsn, random.Random(11)
        self.stop_event = threading.Event()
        self.next_key = 1000

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_event.is_set():
                with conn.transaction():
                    for _ in range(self.rng.randrange(1, 4)):
                        self._change(conn)
                time.sleep(0.005)

    def _change(self, conn: psycopg.Connection[Any]) -> None:
        roll = self.rng.random()
        if roll < 0.4:
            self.next_key += 1
            conn.execute("INSERT INTO items VALUES (%s, md5(random()::text), 0)", [self.next_key])
        elif roll < 0.85:
            conn.execute(
                "UPDATE items SET n = n + 1, v = md5(random()::text) WHERE id = "
                "(SELECT id FROM items ORDER BY random() LIMIT 1)"
            )
        else:
            conn.execute(
                "DELETE FROM items WHERE id = (SELECT id FROM items ORDER BY random() LIMIT 1)"
            )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(SECRET)
    yield found
    found.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _pipeline(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "hooks.yaml"
    path.write_text(
        f"version: 1\nname: hooks\nmetrics:\n  listen: '127.0.0.1:{port}'\n"
        "source:\n  type: postgres\n  dsn: ${PG_DSN}\n"
        "  tables: [public.items]\n  snapshot: initial\n  status_interval_s: 1\n"
        "sinks:\n"
        "  - name: hooks\n    type: http\n    url: ${HOOK_URL}\n    secret: ${HOOK_SECRET}\n"
        "    format: rows\n    batch_size: 40\n"
        "    retry: {initial_backoff_s: 0.05, max_backoff_s: 0.5}\n"
    )
    return path


def _kill_mid_request(
    receiver: Receiver,
    process: Any,
    writer: Writer,
    pipeline: Path,
    tmp_path: Path,
    env: dict[str, str],
    records: int,
) -> None:
    """SIGKILL ``cdc run`` while the workload writes and a request of the sink is in flight:
    the receiver has taken its records and holds the answer back."""
    log = tmp_path / "run.log"
    wait_for(
        lambda: topic_records(pipeline, TOPIC, tmp_path, env) >= records,
        60,
        process=process,
        log=log,
    )
    receiver.holding.clear()
    receiver.release.clear()
    receiver.plan("hold")
    wait_for(receiver.holding.is_set, 60, process=process, log=log)
    assert writer.is_alive(), "the workload ended: the kill would test nothing"
    stop(process, signal.SIGKILL)
    receiver.release.set()


def _table(dsn: str) -> dict[int, dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id, v, n FROM items").fetchall()
    return {i: {"id": i, "v": v, "n": n} for i, v, n in rows}


def _received(receiver: Receiver) -> dict[int, dict[str, Any]]:
    return {orjson.loads(k)["id"]: row for k, row in receiver.rows("public.items").items()}


def test_webhook_after_two_sigkills_equals_the_table(
    pg_db: str, receiver: Receiver, tmp_path: Path
) -> None:
    installed = {ep.name for ep in entry_points(group="cdc.sinks")}
    assert "http" in installed, f"the http sink is not installed: {sorted(installed)}"
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)")
        conn.execute("INSERT INTO items SELECT g, md5(g::text), 0 FROM generate_series(1, 300) g")
    env = {"PG_DSN": pg_db, "HOOK_URL": receiver.url, "HOOK_SECRET": SECRET}
    port = _free_port()
    pipeline = _pipeline(tmp_path, port)
    receiver.plan("500", "ok", "drop", "ok", "429:1")
    writer = Writer(pg_db)
    writer.start()
    try:
        records = 300
        for _ in range(2):
            process = start_run(pipeline, tmp_path, env)
            records += 150
            _kill_mid_request(receiver, process, writer, pipeline, tmp_path, env, records)
        process = start_run(pipeline, tmp_path, env)
        wait_for(
            lambda: topic_records(pipeline, TOPIC, tmp_path, env) >= records + 50,
            60,
            process=process,
            log=tmp_path / "run.log",
        )
    finally:
        writer.stop_event.set()
        writer.join(10)
    expected = _table(pg_db)
    seen: dict[str, Any] = {}

    def caught_up() -> bool:
        seen["received"] = len(_received(receiver))
        return _received(receiver) == expected

    wait_for(caught_up, 120, 0.2, process=process, log=tmp_path / "run.log", last_seen=seen)
    assert receiver.bad_signatures == 0 and receiver.conflicts == []
    # The held requests' records were taken, never acknowledged (the sender was killed), and
    # came again after the restart: under the same ids (and, above, the same content).
    assert receiver.held and all(receiver.received[i] >= 2 for i in receiver.held)
    assert {r.status for r in receiver.requests} >= {200, 500, 429}
    assert len(expected) > 250
    _verify_says_not_verifiable(tmp_path, pipeline, env, process)
    _metrics_count_the_deliveries(port)
    assert stop(process)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
    cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def _metrics_count_the_deliveries(port: int) -> None:
    """The runtime's sink task reports the contract's metrics for this sink as for any."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    labels = 'pipeline="hooks",sink="hooks"'
    applied = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("cdc_sink_applied_total{") and labels in line
    ]
    assert applied and sum(applied) > 0, text[-2000:]
    assert f'cdc_sink_state{{{labels},state="running"}} 1.0' in text


def _verify_says_not_verifiable(
    tmp_path: Path, pipeline: Path, env: dict[str, str], process: Any
) -> None:
    def lag_zero() -> bool:
        return all(s["lag"] == 0 for s in status_json(pipeline, tmp_path, env)["sinks"])

    wait_for(lag_zero, 60, 0.2, process=process, log=tmp_path / "run.log")
    result = cdc("verify", str(pipeline), "--json", cwd=tmp_path, env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    report = orjson.loads(result.stdout)
    assert [(r["sink"], r["state"]) for r in report] == [("hooks", "unverifiable")], report
    assert "http" in report[0]["unverifiable"]
