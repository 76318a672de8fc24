"""``cdc run``'s first start against PostgreSQL: what it checks before it creates anything.

An unreachable server stops a pipeline that never ran (exit 1 after ``connect_timeout_s``), and
is retried with backoff once the pipeline has run. A sink that cannot start at all stops the
first start before the slot and the publication exist, so a failed first start pins no WAL.
"""

from __future__ import annotations

import signal
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.e2e.cli_helpers import latest_per_key, start_run, stop, tail_all, wait_for
from tests.services.ports import free_port

PIPELINE = "first"
TOPIC = f"{PIPELINE}.public.items"


def _pipeline(tmp_path: Path, extra_source: str = "", sinks: str = "") -> Path:
    path = tmp_path / "first.yaml"
    path.write_text(
        f"version: 1\nname: {PIPELINE}\nsource:\n  type: postgres\n  dsn: ${{FIRST_DSN}}\n"
        "  tables: [public.items]\n  snapshot: initial\n  connect_timeout_s: 2\n"
        f"{extra_source}log:\n  type: embedded\n  path: log\n{sinks}"
    )
    return path


def _events(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    """The ``name`` events of ``cdc run``'s JSON log lines, in order."""
    events = []
    for line in (tmp_path / "run.log").read_text().splitlines():
        if line.startswith("{"):
            event = orjson.loads(line)
            if event.get("event") == name:
                events.append(event)
    return events


def _replication_objects(dsn: str) -> tuple[list[str], list[str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        slots = conn.execute(
            "SELECT slot_name::text FROM pg_replication_slots WHERE database = current_database()"
        ).fetchall()
        publications = conn.execute("SELECT pubname::text FROM pg_publication").fetchall()
    return [s for (s,) in slots], [p for (p,) in publications]


def _create_items(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
        conn.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")


def test_an_unreachable_server_at_first_start_exits_1_after_connect_timeout(
    tmp_path: Path,
) -> None:
    # Nothing listens on the port: every attempt is refused at once, so without a bound the
    # runtime would retry forever.
    dsn = f"postgresql://cdc:s3cret-pw@127.0.0.1:{free_port()}/shop"
    run = start_run(_pipeline(tmp_path), tmp_path, {"FIRST_DSN": dsn})
    try:
        code = run.wait(90)
    finally:
        if run.poll() is None:
            stop(run, signal.SIGKILL)
    output = (tmp_path / "run.log").read_text()
    assert code == 1, output
    [failed] = _events(tmp_path, "pipeline.failed")
    assert failed["task"] == "source"
    assert "unreachable" in failed["error"] and "gave up after 2 s" in failed["error"]
    assert "s3cret-pw" not in output
    assert _events(tmp_path, "source.retrying"), "it retried within the bound first"


def test_an_unreachable_server_after_a_first_run_is_retried_until_it_returns(
    pg_db: str, pg_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pg_server.supports_restart:
        pytest.skip("server given by address: cannot stop it")
    monkeypatch.setenv("FIRST_DSN", pg_db)  # cdc tail reads the file too
    _create_items(pg_db)
    pipeline, env = _pipeline(tmp_path), {"FIRST_DSN": pg_db}
    log = tmp_path / "run.log"
    run = start_run(pipeline, tmp_path, env)
    try:
        wait_for(lambda: _events(tmp_path, "source.opened"), 60, process=run, log=log)
        wait_for(lambda: len(latest_per_key(tail_all(pipeline, TOPIC, tmp_path))) == 2, 60)
        assert stop(run)[0] == 0
        pg_server.stop()
        try:
            run = start_run(pipeline, tmp_path, env)
            # Retried past the first start's bound (2 s) and still running: a stored position
            # means the pipeline has run, so an outage is sat out, not a reason to stop.
            wait_for(lambda: _retried_for(tmp_path) > 6, 90, process=run, log=log)
        finally:
            pg_server.start()
        with psycopg.connect(pg_db, autocommit=True) as conn:
            conn.execute("INSERT INTO items VALUES (3, 'three')")
        wait_for(
            lambda: len(latest_per_key(tail_all(pipeline, TOPIC, tmp_path))) == 3,
            90,
            process=run,
            log=log,
        )
        assert stop(run)[0] == 0, log.read_text()
        assert not _events(tmp_path, "pipeline.failed")
    finally:
        if run.poll() is None:
            stop(run, signal.SIGKILL)


def _retried_for(tmp_path: Path) -> float:
    """Seconds between the first and the last ``source.retrying`` of the current run."""
    retries = _events(tmp_path, "source.retrying")
    if len(retries) < 2:
        return 0.0
    first, last = (datetime.fromisoformat(e["timestamp"]) for e in (retries[0], retries[-1]))
    return (last - first).total_seconds()


def test_a_sink_that_cannot_start_stops_the_first_start_before_the_slot_exists(
    pg_db: str, tmp_path: Path
) -> None:
    _create_items(pg_db)
    (tmp_path / "a-file").write_text("not a directory\n")
    sinks = "sinks:\n  - name: warehouse\n    type: duckdb\n    path: a-file/shop.duckdb\n"
    run = start_run(_pipeline(tmp_path, sinks=sinks), tmp_path, {"FIRST_DSN": pg_db})
    try:
        code = run.wait(90)
    except subprocess.TimeoutExpired:
        stop(run, signal.SIGKILL)
        raise
    output = (tmp_path / "run.log").read_text()
    assert code == 1, output
    assert _replication_objects(pg_db) == ([], []), "the failed first start left them behind"
    assert not _events(tmp_path, "slot.created")
    [failed] = _events(tmp_path, "pipeline.failed")
    assert failed["task"] == "sink:warehouse"
    assert "a-file" in failed["error"] and "nothing was created on the source" in failed["error"]
