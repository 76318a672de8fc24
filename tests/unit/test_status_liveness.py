"""``cdc status`` checks stored states against the processes' beats: a process whose beats
stopped without a ``stopped`` one (SIGKILL) is gone, its snapshot paused and its sinks not
running; a live process's sink keeps its own state (``retrying`` included)."""

from __future__ import annotations

from typing import Any

from cdc.cli.status_liveness import as_running, as_served
from cdc.runtime.heartbeat import GONE, RUNNING, STOPPED, _as_of, stale_after_s

NOW = 1_000_000_000


def _beat(state: str, age_s: float, role: str = "all") -> dict[str, Any]:
    value = {"state": state, "role": role, "sinks": None, "every_s": 5.0}
    return _as_of({**value, "beat_ms": NOW - int(age_s * 1000)}, NOW)


def test_a_process_whose_beats_stopped_is_gone() -> None:
    assert _beat(RUNNING, 1)["state"] == RUNNING
    assert _beat(RUNNING, stale_after_s(5.0) + 1)["state"] == GONE
    assert _beat(STOPPED, 3600)["state"] == STOPPED


def test_a_killed_pipeline_pauses_its_snapshot_and_its_sinks() -> None:
    killed = [_beat(RUNNING, 60)]
    row = {"table": "public.t", "state": "running", "eta_s": 12}
    [paused] = as_running([row], killed)
    assert (paused["state"], paused["eta_s"]) == ("paused", None)
    assert "no process has reported for 60 s" in paused["reason"]
    sink = as_served({"sink": "cache", "state": "retrying", "reason": "down"}, killed)
    assert (sink["state"], sink["recorded_state"]) == ("not running", "retrying")


def test_a_running_process_keeps_the_recorded_states() -> None:
    live = [_beat(RUNNING, 1)]
    row = {"table": "public.t", "state": "running", "eta_s": 12}
    assert as_running([row], live) == [row]
    sink = {"sink": "cache", "state": "retrying", "reason": "Redis away"}
    assert as_served(sink, live) == sink
    # A source-only process runs no sink.
    assert as_served(sink, [_beat(RUNNING, 1, "source")])["state"] == "not running"


def test_a_sink_stopped_by_an_error_keeps_its_reason_when_nothing_runs() -> None:
    sink = {"sink": "wh", "state": "stopped", "reason": "not a widening change"}
    assert as_served(sink, []) == sink


def test_a_running_state_recorded_before_the_serving_process_started_is_starting() -> None:
    """A clean stop leaves the sink's ``running``: a new run's process beats before its task
    opened the sink, and status said running (with the group's old offsets: caught up)."""
    started = NOW - 2_000
    restarted = [{**_beat(RUNNING, 1), "started_ms": started}]
    earlier = {"sink": "wh", "state": "running", "since_ms": started - 5_000}
    shown = as_served(earlier, restarted)
    assert (shown["state"], shown["recorded_state"]) == ("starting", "running")
    opened = {"sink": "wh", "state": "running", "since_ms": started + 100}
    assert as_served(opened, restarted) == opened
    two = [*restarted, {**_beat(RUNNING, 1), "started_ms": started - 10_000}]
    assert as_served(earlier, two) == earlier  # an older process serves it: its state
    unknown = [_beat(RUNNING, 1)]  # a beat without a start time: as recorded
    assert as_served(earlier, unknown) == earlier
