"""``cdc sink FILE NAME --reset-table T --wait``: follow the resets until the sink holds them.

A reset is *done* once the sink applied, in each partition of the table's topic, the last
record that was there at the reset. That alone does not mean the sink runs: a record it cannot
apply (the same one that stopped it, in another of its tables, or just after the rebuilt
part) stops it again at once. So the wait ends in success only when every reset is done and
the sink then applied every record its topics held at that moment without stopping; the sink
stopping at any point after the request ends it at once, with exit 1 and the sink's reason.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from cdc.log.base import Log, TopicPartition
from cdc.log.offsets import last_offsets
from cdc.runtime.sink_control import APPLIED, DONE, FAILED, STOPPED, Reset, SinkControl
from cdc.support.wait import WaitTimeout, wait_until

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
    follower = _Follower(log, control, requests, topics, group)
    try:
        wait_until(follower.ended, timeout_s, POLL_S)
    except WaitTimeout:
        _timed_out(follower.current, timeout_s, follower.caught_up_at is not None)
        return EXIT_RUNTIME
    return follower.exit_code


class _Follower:
    """One look at the requests per :meth:`ended`, printing what changed since the last."""

    def __init__(
        self,
        log: Log,
        control: SinkControl,
        requests: list[Reset],
        topics: Sequence[str],
        group: str,
    ) -> None:
        self._log, self._control, self._requests = log, control, requests
        self._topics, self._group = topics, group
        self._seen = {r.id: r.state for r in requests}
        self._sink, self._since = requests[0].sink, min(r.requested_ms for r in requests)
        self.current = list(requests)
        self.caught_up_at: dict[TopicPartition, int] | None = None
        self.exit_code = EXIT_RUNTIME

    def ended(self) -> bool:
        """Whether the wait is over, with :attr:`exit_code` set."""
        self._control.refresh()
        self.current = [self._control.find(r.sink, r.id) or r for r in self._requests]
        for request in self.current:
            if self._seen[request.id] != request.state:
                self._seen[request.id] = request.state
                click.echo(f"{request.table}: {_describe(request)}")
        reason = _stopped_since(self._control, self._sink, self._since)
        states = {r.state for r in self.current}
        if FAILED in states and states <= {DONE, FAILED}:
            return True
        if reason is not None:
            click.echo(
                f"error: sink {self._sink} stopped again after the reset: {reason}", err=True
            )
            return True
        if states <= {DONE}:
            self.caught_up_at = self.caught_up_at or _ends(self._log, self._topics)
            if _reached(self._log, self._group, self.caught_up_at):
                click.echo(f"sink {self._sink}: running, caught up with the log")
                self.exit_code = EXIT_OK
                return True
        return False


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
