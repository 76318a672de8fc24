"""Liveness, readiness and the stall alarm of a running pipeline's tasks.

Each task (``source``, ``sink:<name>``, ``view:<name>`` for a live join view) reports what it
does: it opened, it made progress (a commit to the log, an applied batch, a view's committed
batch), it is retrying or stopped. The sampler (:mod:`cdc.metrics.sampler`) reports whether
work is waiting for it: for the source, the server has WAL past the slot's position; for a sink
or a view, its lag is above 0. A task that makes no progress while work waits, for
``stall_after_s`` of waiting, is *stalled*: an error event is logged once, the
``cdc_task_stalled`` gauge is 1 and ``/readyz`` fails, until progress resumes (or nothing waits
any more).

The stall clock counts from the later of the task's last progress and the start of its current
waiting period. A waiting period ends only once :data:`SETTLED_SAMPLES` samples in a row saw
nothing waiting: one not-waiting sample between waiting ones is a flip, and the period goes on
through it. Why: a task whose input is stuck but whose sample flaps (one reading of its lag at 0
although it committed nothing) would otherwise restart its clock at each flip and could hide a
stall forever, and a stalled one would log ``task.stall_cleared`` and ``task.stalled`` again at
each flip. Only progress always resets the clock and clears a stall at once. The price: after a
batch that emptied its lag, a task whose next work arrives within one sample has its clock
counting from that batch rather than from the work's arrival, at most two sample intervals
earlier.

- ``/healthz``: every task's thread is alive (a sink an error stopped is alive: it waits for a
  table reset; the source's death ends the process, and so does a view's).
- ``/readyz``: the source is open (streaming, or snapshotting: its rows are its progress),
  every sink is open and running (or a standby: another worker leads it), every view is open
  and running, and no task is stalled; else 503 with the reasons.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cdc.metrics.registry import SINK_STATES, STANDBY, Metrics
from cdc.support.logging import Logger

#: Not-waiting samples in a row that end a task's waiting period (fewer are a flip).
SETTLED_SAMPLES = 2


@dataclass
class TaskState:
    """What one task said of itself, and what the sampler saw."""

    name: str
    opened: bool = False
    # running, retrying, stopped, standby (sinks); running, retrying, stopped (views); running
    state: str = "starting"
    error: str | None = None
    last_progress: float = field(default_factory=time.monotonic)
    waiting: bool = False  # work waits for the task, through a one-sample flip (the stall's)
    waiting_since: float = field(default_factory=time.monotonic)  # since it last began to wait
    sampled: bool = False  # the sampler's latest sample as it is: work waited when it was taken
    quiet: int = 0  # the latest samples in a row that saw nothing waiting, up to SETTLED_SAMPLES
    stalled: bool = False
    consistent: str | None = None  # a sink's consistent source position (cdc wait's)


class Health:
    """The tasks' states, the stall alarm and the two probes' answers.

    Args:
        metrics: where the stall and progress gauges live.
        pipeline: the ``pipeline`` label.
        stall_after_s: how long a task may make no progress while work waits for it.
        logger: where the stall is reported (once per stall).
        alive: the names of the task threads that are not alive (dead ones fail ``/healthz``).
    """

    def __init__(
        self,
        metrics: Metrics,
        pipeline: str,
        stall_after_s: float,
        logger: Logger,
        alive: Callable[[], list[str]] = list,
    ) -> None:
        self._metrics = metrics
        self._pipeline = pipeline
        self._stall_after_s = stall_after_s
        self._logger = logger
        self._dead = alive
        self._tasks: dict[str, TaskState] = {}
        self._lock = threading.Lock()

    def task(self, name: str) -> TaskState:
        with self._lock:
            state = self._tasks.get(name)
            if state is None:
                state = self._tasks[name] = TaskState(name)
                self._metrics.task_stalled.labels(self._pipeline, name).set(0)
            return state

    def opened(self, name: str) -> None:
        state = self.task(name)
        state.opened, state.error = True, None
        self.set_state(name, "running")
        self.progress(name)

    def progress(self, name: str) -> None:
        """The task moved: resets its stall clock (and clears a stall)."""
        state = self.task(name)
        with self._lock:  # not between evaluate's reading of the clock and its flagging
            state.last_progress = time.monotonic()
            self._metrics.last_progress.labels(self._pipeline, name).set(time.time())
            if state.stalled:
                self._clear(state)

    def set_state(self, name: str, value: str, error: BaseException | None = None) -> None:
        """A sink's state (running, retrying, stopped, standby), as ``cdc_sink_state`` says, or
        a view's (running, retrying, stopped: it has no metric of its own)."""
        state = self.task(name)
        state.state = value
        state.error = None if error is None else str(error)
        sink = name.removeprefix("sink:")
        if name.startswith("sink:"):
            for each in SINK_STATES:
                self._metrics.sink_state.labels(self._pipeline, sink, each).set(each == value)

    def consistent(self, name: str, position: str) -> None:
        """The source position a sink task holds every change up to, for ``/readyz``."""
        self.task(name).consistent = position

    def waiting(self, name: str, waiting: bool) -> None:
        """The sampler's sample: whether work waits for the task now."""
        state = self.task(name)
        with self._lock:
            state.sampled = waiting
            state.quiet = 0 if waiting else min(state.quiet + 1, SETTLED_SAMPLES)
            settled = waiting or (state.waiting and state.quiet < SETTLED_SAMPLES)
            if settled and not state.waiting:
                # The stall clock runs from here when the task was idle before: a task idle for
                # longer than stall_after_s is not stalled by work the sampler sees the moment
                # it arrives, before the task could take it.
                state.waiting_since = time.monotonic()
            state.waiting = settled

    def evaluate(self) -> None:
        """Flag the tasks stalled now (the sampler calls this after each sample)."""
        with self._lock:
            states = list(self._tasks.values())
        for state in states:
            with self._lock:  # a progress() meanwhile would be lost under the flag it clears
                self._evaluate(state, time.monotonic())

    def _evaluate(self, state: TaskState, now: float) -> None:
        idle_s = now - max(state.last_progress, state.waiting_since)
        # A standby applies nothing by design: the leader's lag is no stall of its own.
        waiting = state.waiting and state.state != STANDBY
        if waiting and idle_s >= self._stall_after_s and not state.stalled:
            state.stalled = True
            self._metrics.task_stalled.labels(self._pipeline, state.name).set(1)
            self._logger.error(
                "task.stalled",
                task=state.name,
                no_progress_s=round(idle_s, 1),
                stall_after_s=self._stall_after_s,
            )
        elif state.stalled and not waiting:
            self._clear(state)

    def _clear(self, state: TaskState) -> None:
        state.stalled = False
        self._metrics.task_stalled.labels(self._pipeline, state.name).set(0)
        self._logger.info("task.stall_cleared", task=state.name)

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        dead = self._dead()
        return not dead, {"status": "ok" if not dead else "dead", "dead_tasks": dead}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        reasons = []
        for state in sorted(self._tasks.values(), key=lambda s: s.name):
            if state.state == STANDBY:  # ready: it takes over when the leader dies
                continue
            if not state.opened:  # with the error its attempts to open met, if any
                detail = f": {state.state}: {state.error}" if state.error else ""
                reasons.append(f"{state.name}: not open yet{detail}")
            elif state.state != "running":
                detail = f": {state.error}" if state.error else ""
                reasons.append(f"{state.name}: {state.state}{detail}")
            if state.stalled:
                reasons.append(f"{state.name}: stalled (no progress while work waits)")
        if not self._tasks:
            reasons.append("no task has started")
        ready = not reasons
        body: dict[str, Any] = {"status": "ready" if ready else "not ready", "reasons": reasons}
        consistent = {
            s.name.removeprefix("sink:"): s.consistent
            for s in self._tasks.values()
            if s.consistent is not None
        }
        if consistent:  # each sink's consistent source position (cdc wait)
            body["consistent_positions"] = dict(sorted(consistent.items()))
        return ready, body
