"""A whole pipeline through the CLI, as a user runs one: the generator source into this sink on
the embedded log, killed with SIGKILL halfway and started again; then ``cdc verify`` compares
the sink with the source, table by table, and ``cdc doctor`` checks the sink's file."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from cdc.log.embedded import EmbeddedLog
from cdc.testing import wait_until

CHANGES = 2400
PIPELINE = f"""\
version: 1
name: gen
source:
  type: generator
  tables: [public.customers, public.orders]
  changes: {CHANGES}
  rate: 800
  keys: 200
  transaction_size: 20
log:
  type: embedded
  partitions: 3
sinks:
  - name: lite
    type: sqlite
    path: out/shop.db
"""


def cdc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def start(cwd: Path) -> subprocess.Popen[bytes]:
    log = (cwd / "run.log").open("ab")
    command = [sys.executable, "-m", "cdc.cli.main", "run", "gen.yaml"]
    return subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)


def status(cwd: Path) -> dict[str, Any]:
    result = cdc("status", "gen.yaml", "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = orjson.loads(result.stdout)
    return parsed


def generated(cwd: Path) -> int:
    """How many changes the source has stored in the log, read in this process: a
    ``cdc status`` subprocess can take a second on a loaded machine, in which the generator
    may run on to its end before the kill."""
    log_dir = cwd / ".cdc" / "gen"
    if not log_dir.exists():
        return 0
    log = EmbeddedLog(log_dir)
    try:
        return int(log.source_offsets().get("generator", {}).get("next", 0))
    finally:
        log.close()


def caught_up(cwd: Path) -> bool:
    state = status(cwd)
    offsets = state["source"]["offsets"] or {}
    done: bool = offsets.get("generator", {}).get("next") == CHANGES
    return done and state["sinks"][0]["lag"] == 0


def test_a_pipeline_into_sqlite_survives_a_sigkill_and_verify_agrees(tmp_path: Path) -> None:
    (tmp_path / "gen.yaml").write_text(PIPELINE)
    run = start(tmp_path)
    try:
        wait_until(lambda: generated(tmp_path) >= 600, 60, describe="600 changes stored")
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(30)
    assert generated(tmp_path) < CHANGES, "killed after the end: nothing was tested"
    run = start(tmp_path)
    try:
        wait_until(lambda: caught_up(tmp_path), 120, describe="every change in the sink")
    finally:
        run.send_signal(signal.SIGTERM)
        assert run.wait(30) == 0, (tmp_path / "run.log").read_text()[-3000:]
    verified = cdc("verify", "gen.yaml", "--json", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    tables = {t["table"]: t for t in orjson.loads(verified.stdout)}
    assert set(tables) == {"public.customers", "public.orders"}
    for table in tables.values():
        assert table["state"] == "ok" and table["sink_rows"]["count"] > 0, table
    doctor = cdc("doctor", "gen.yaml", "--json", cwd=tmp_path)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    checks = [c for c in orjson.loads(doctor.stdout)["checks"] if c["scope"] == "sink lite"]
    assert [c["name"] for c in checks] == ["sqlite version", "path"]
    assert all(c["ok"] for c in checks), checks
