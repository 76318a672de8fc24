"""``cdc sink FILE NAME --reset-table T --wait``: follow the resets until the sink holds them.

A reset is *done* once the sink applied, in each partition of the table's topic, the last
record that was there at the reset. That alone does not mean the sink runs: a record it cannot
apply (the same one that stopped it, in another of its tables, or just after the rebuilt
part) stops it again at once. So the wait ends in success only when every reset is done and
the sink then applied every record its topics held at that moment without stopping; the sink
stopping at any point after the request ends it at once, with exit 1 and the sink's reason.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import click

from cdc.log.base import Log, TopicPartition
from cdc.log.offsets import last_offsets
from cdc.runtime.sink_control import APPLIED, DONE, FAILED, STOPPED, Reset, SinkControl

EXIT_OK, EXIT_RUNTIME = 0, 1
POLL_S = 0.5


def follow(
    log: Log,
    control: SinkControl,
    requests: list[Reset],
    topics: Sequence[str],
    group: str,
    timeout_s: float,
) -> int:
    """Print each request's progress until the sink holds them all and caught up (0), one
    failed or the sink stopped (1, with the reason), or the time is up (1)."""
    deadline = time.monotonic() + timeout_s
    seen = {r.id: r.state for r in requests}
    caught_up_at: dict[TopicPartition, int] | None = None
    sink, since = requests[0].sink, min(r.requested_ms for r in requests)
    while True:
        control.refresh()
        current = [control.find(r.sink, r.id) or r for r in requests]
        for request in current:
            if seen[request.id] != request.state:
                seen[request.id] = request.state
                click.echo(f"{request.table}: {_describe(request)}")
        reason = _stopped_since(control, sink, since)
        states = {r.state for r in current}
        if FAILED in states and states <= {DONE, FAILED}:
            return EXIT_RUNTIME
        if reason is not None:
            click.echo(f"error: sink {sink} stopped again after the reset: {reason}", err=True)
            return EXIT_RUNTIME
        if states <= {DONE}:
            caught_up_at = caught_up_at or _ends(log, topics)
            if _reached(log, group, caught_up_at):
                click.echo(f"sink {sink}: running, caught up with the log")
                return EXIT_OK
        if time.monotonic() >= deadline:
            _timed_out(current, timeout_s, caught_up_at is not None)
            return EXIT_RUNTIME
        time.sleep(POLL_S)


def _stopped_since(control: SinkControl, sink: str, since_ms: int) -> str | None:
    """The reason the sink stopped, if it did after ``since_ms`` (a stop before the request
    is what the reset repairs)."""
    state = control.state(sink, refresh=False) or {}
    if state.get("state") == STOPPED and int(state.get("since_ms") or 0) >= since_ms:
        return str(state.get("reason"))
    return None


def _ends(log: Log, topics: Sequence[str]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, p): offset
        for topic in topics
        for p, offset in last_offsets(log, topic).items()
    }


def _reached(log: Log, group: str, targets: dict[TopicPartition, int]) -> bool:
    committed = log.committed_offsets(group)
    return all(committed.get(tp, 0) >= offset for tp, offset in targets.items())


def _timed_out(current: list[Reset], timeout_s: float, done: bool) -> None:
    if done:
        what = "the tables are rebuilt but the sink has not caught up with the log yet"
    else:
        waiting = [r.table for r in current if r.state not in (DONE, FAILED)]
        what = f"not rebuilt yet: {', '.join(waiting)}"
    click.echo(
        f"error: timed out after {timeout_s:g} s; {what} (is the pipeline running? the "
        "request stays recorded and is applied when the sink next runs)",
        err=True,
    )


def _describe(request: Reset) -> str:
    if request.state == APPLIED:
        return "reset; rebuilding from the log"
    if request.state == DONE:
        return "rebuilt from the log"
    if request.state == FAILED:
        return f"failed: {request.reason}"
    return request.state
