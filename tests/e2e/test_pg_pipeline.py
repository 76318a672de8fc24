"""``cdc run`` with the PostgreSQL source: a random workload, SIGKILL in the middle, restart;
the final per-key state of the topic equals the table."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cdc.testing import WaitTimeout, wait_until
from tests.e2e.cli_helpers import (
    cdc,
    kill_mid_workload,
    latest_per_key,
    start_run,
    stop,
    tail_all,
    wait_for,
)

TOPIC = "pge.public.accounts"


def _pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "pge.yaml"
    path.write_text(
        "version: 1\nname: pge\nsource:\n  type: postgres\n  dsn: ${PGE_DSN}\n"
        "  tables: [public.accounts]\n  snapshot: never\n  status_interval_s: 1\n"
        "log:\n  type: embedded\n"
    )
    return path


def _workload(
    dsn: str,
    stop_at: float,
    seed: int,
    stop: threading.Event | None = None,
    committed: list[int] | None = None,
) -> None:
    """Random changes to ``accounts`` until ``stop_at`` or, sooner, until ``stop`` is set;
    ``committed[0]`` counts the transactions committed."""
    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < stop_at and not (stop is not None and stop.is_set()):
            with conn.transaction():
                for _ in range(rng.randint(1, 20)):
                    key = rng.randint(1, 300)
                    kind = rng.random()
                    if kind < 0.5:
                        conn.execute(
                            "INSERT INTO accounts VALUES (%s, %s, 0) ON CONFLICT (id)"
                            " DO UPDATE SET balance = accounts.balance + 1, note = EXCLUDED.note",
                            (key, f"n{rng.random()}"),
                        )
                    elif kind < 0.8:
                        conn.execute(
                            "UPDATE accounts SET balance = balance - 1 WHERE id = %s", (key,)
                        )
                    else:
                        conn.execute("DELETE FROM accounts WHERE id = %s", (key,))
            if committed is not None:
                committed[0] += 1
            time.sleep(0.002)


def wait_written(writer: threading.Thread, committed: list[int], what: str, more: int = 50) -> None:
    """Until the workload committed ``more`` transactions from now (or ended)."""
    goal = committed[0] + more
    wait_until(lambda: committed[0] >= goal or not writer.is_alive(), 60, 0.01, describe=what)


def _table(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id, note, balance FROM accounts").fetchall()
    return {f'{{"id":{i}}}': {"id": i, "note": n, "balance": b} for i, n, b in rows}


@pytest.mark.pgcore
def test_sigkill_mid_workload_then_restart(
    pg_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGE_DSN", pg_db)  # cdc tail and cdc drop read the file too
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, note text, balance int)")
    pipeline, env = _pipeline(tmp_path), {"PGE_DSN": pg_db}
    run = start_run(pipeline, tmp_path, env)
    try:
        run = _kill_mid_workload_and_restart(run, pg_db, pipeline, tmp_path, env)
        _wait_for_the_topic_to_equal(_table(pg_db), pipeline, tmp_path)
        code, _ = stop(run)
        assert code == 0, (tmp_path / "run.log").read_text()
    finally:
        if run.poll() is None:
            stop(run, signal.SIGKILL)
        dropped = cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
        assert dropped.returncode == 0, dropped.stderr
    assert "slot pge_slot" in dropped.stdout


def _kill_mid_workload_and_restart(
    run: subprocess.Popen[str], dsn: str, pipeline: Path, tmp_path: Path, env: dict[str, str]
) -> subprocess.Popen[str]:
    """SIGKILLs ``run`` mid-workload and starts it again; returns once the workload ended."""
    # snapshot: never streams from the slot's creation on: write only once it exists.
    wait_for(lambda: "source.opened" in (tmp_path / "run.log").read_text(), timeout=60)
    committed = [0]
    writer = threading.Thread(
        target=_workload, args=(dsn, time.monotonic() + 8, 7, None, committed)
    )
    writer.start()
    kill_mid_workload(run, writer, pipeline, TOPIC, tmp_path, env)
    wait_written(writer, committed, "writes while it is down")
    run = start_run(pipeline, tmp_path, env)
    writer.join()
    return run


def _wait_for_the_topic_to_equal(expected: dict[str, Any], pipeline: Path, tmp_path: Path) -> None:
    """Waits until the topic's latest record per key is the table; on timeout, says which differ."""

    def caught_up() -> bool:
        return latest_per_key(tail_all(pipeline, TOPIC, tmp_path)) == expected

    try:
        wait_for(caught_up, timeout=60, interval=0.5)
    except WaitTimeout:
        state = latest_per_key(tail_all(pipeline, TOPIC, tmp_path))
        diff = {
            k: (state.get(k), expected.get(k))
            for k in set(state) | set(expected)
            if state.get(k) != expected.get(k)
        }
        log = (tmp_path / "run.log").read_text()[-4000:]
        raise AssertionError(f"topic differs from table (topic, table): {diff}\n{log}") from None
