"""Failure reasons kept in stored state (a sink's stop, a failed snapshot request) hold no secret.

Both reasons are an exception's text, and a driver's message that escaped translation at the
plugin boundary can quote the DSN it failed on; stored state outlives every log line.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from cdc.log.embedded import EmbeddedLog
from cdc.runtime.sink_control import SinkControl
from snapshots.state import SnapshotState

SECRET = "s3cr3t-Pw"
DSN = f"postgresql://app@db.example:5432/shop?password={SECRET}&sslmode=require"


def test_a_stopped_sinks_stored_reason_is_redacted(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log", partitions=1)
    try:
        control = SinkControl(log, "p", create=True)
        control.set_state("replica", "stopped", RuntimeError(f"cannot connect to {DSN}"))
        state = SinkControl(log, "p").state("replica")
    finally:
        log.close()
    assert state is not None and state["state"] == "stopped"
    assert SECRET not in state["reason"]
    assert "db.example" in state["reason"]  # the rest of the message stays readable
    stored = b"".join(p.read_bytes() for p in (tmp_path / "log").rglob("*") if p.is_file())
    assert SECRET.encode() not in stored


def test_a_failed_snapshot_requests_stored_reason_is_redacted() -> None:
    state = SnapshotState()
    state.add_request({"id": "r1", "table": "public.t", "where": None})
    assert state.fail("public.t", "r1", None, f'connection to "{DSN}" failed') == "r1"
    [failure] = state.to_json()["failed"]
    assert SECRET not in orjson.dumps(state.to_json()).decode()
    assert "db.example" in failure["reason"]
