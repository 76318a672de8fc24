"""``cdc status`` as of now: what the stored states say, checked against the processes that run.

The stored states (a sink's ``running``, a snapshot's rate and ETA) are what the running
process last wrote; after it stopped, or was killed, they would still say so. The processes'
beats (:mod:`cdc.runtime.heartbeat`) tell whether anything runs: a sink no running process
serves is ``not running``, and a snapshot whose source runs nowhere is ``paused``, without an
ETA. A sink that a process runs shows its own state, the one ``/readyz`` gives (``running``,
``retrying`` while its store is away, ``stopped`` by an error).
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console

from cdc.runtime import heartbeat
from cdc.runtime.sink_control import RETRYING, RUNNING

NOT_RUNNING = "not running"
STARTING = "starting"
PAUSED = "paused"


def as_running(rows: list[dict[str, Any]], found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The snapshot rows, a running one ``paused`` (no ETA) when no process runs the source."""
    if heartbeat.runs_source(found):
        return rows
    why = f"{_why(found)}; the snapshot resumes where it stopped at the next cdc run"
    return [
        {**row, "state": PAUSED, "eta_s": None, "reason": why} if row["state"] == "running" else row
        for row in rows
    ]


def as_served(sink: dict[str, Any], found: list[dict[str, Any]]) -> dict[str, Any]:
    """``sink``'s report, ``not running`` (the stored state kept as ``recorded_state``) when
    it says running or retrying but no running process serves it; ``starting`` when the
    processes that serve it all started after it recorded ``running``: that state is an
    earlier run's (a clean stop leaves it), and this run's task has not opened the sink yet."""
    serving = heartbeat.serving(found, sink["sink"])
    if serving and sink.get("state") == RUNNING and _recorded_before(sink, serving):
        return {
            **sink,
            "state": STARTING,
            "recorded_state": RUNNING,
            "reason": "the sink is not open yet in the process that runs it",
        }
    if serving or sink.get("state") not in (RUNNING, RETRYING):
        return sink
    last = _last(found)
    return {
        **sink,
        "state": NOT_RUNNING,
        "recorded_state": sink.get("state"),
        "reason": _why(found),
        "since_ms": None if last is None else last.get("beat_ms"),
    }


def _recorded_before(sink: dict[str, Any], serving: list[dict[str, Any]]) -> bool:
    since = sink.get("since_ms")
    started = [p.get("started_ms") for p in serving]
    if since is None or None in started:
        return False
    return all(int(start) > int(since) for start in started if start is not None)


def _last(found: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(found, key=lambda p: int(p.get("beat_ms") or 0), default=None)


def _why(found: list[dict[str, Any]]) -> str:
    last = _last(found)
    if last is None:
        return "no cdc run process has reported for this pipeline"
    if last["state"] == heartbeat.STOPPED:
        return f"the pipeline stopped at {_time(last.get('beat_ms'))}"
    return (
        f"no process has reported for {last['last_seen_s']:g} s (killed, or cut off from the log)"
    )


def print_processes(found: list[dict[str, Any]], console: Console) -> None:
    """One line per process that ran the pipeline: its role, where, and whether it runs."""
    if not found:
        console.print("  processes: none has reported: not running", highlight=False)
        return
    for p in sorted(found, key=lambda p: int(p.get("beat_ms") or 0), reverse=True):
        sinks = "every sink" if p.get("sinks") is None else ", ".join(p["sinks"])
        what = p["role"] if p["role"] == "source" else f"{p['role']} ({sinks})"
        where = f"pid {p.get('pid')} on {p.get('host')}"
        if p["state"] == heartbeat.RUNNING:
            state = f"running, last seen {p['last_seen_s']:g} s ago"
        elif p["state"] == heartbeat.STOPPED:
            state = f"stopped at {_time(p.get('beat_ms'))}"
        else:
            state = f"GONE: no report for {p['last_seen_s']:g} s (killed?)"
        line = f"  process {what}, {where}: {state}"
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _time(ms: Any) -> str:
    if not ms:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(ms) / 1000))
