"""What a view task tells the pipeline's health (:mod:`cdc.metrics.health`): the task
``view:<name>`` in ``/readyz``, ``cdc_task_stalled`` and ``cdc_last_progress_timestamp_seconds``.

- ``starting`` from its creation (``/readyz``: not open yet, as a sink before it opened);
- open once its first session has opened its store and its consumer (a rebuild of the store
  from the state topic comes before: each piece read is progress, not a stall);
- progress each time a batch commits (its group's offsets moved);
- ``retrying`` with the error while a retriable error restarts its sessions, ``running`` again
  once a batch committed, or a poll found nothing while the sampler's latest sample saw nothing
  waiting;
- ``stopped`` with the error that ended it (the process stops too: a view's error is fatal).

That work waits for it (its lag is above 0) the sampler reads from ``cdc_view_lag_records``
(:mod:`cdc.metrics.sampler`), once per sample.

The stall clock. A view is stalled when, for ``stall_after_s``, work waited and it made no
progress; the seconds count from the later of its last progress and the start of its current
waiting period. A waiting period ends only once *two samples in a row* saw nothing waiting
(:data:`SETTLED_SAMPLES`): a single not-waiting sample between waiting ones is a flip, and the
period goes on through it. Why: the health's own rule starts a new period at every
not-waiting -> waiting change, so a view whose input is stuck but whose sample flaps (one
reading of its lag at 0 although it committed nothing, whatever the cause) restarted its clock
at each flip and could hide a stall forever. The alarm's clearing ignores the flip too, so a
stalled view that flaps stays flagged: one ``task.stalled``, not a ``task.stall_cleared`` and a
new ``task.stalled`` at each flip, and no ``/readyz`` flicker. Only progress always resets the
clock and clears a stall at once: a committed batch (or a piece of a store rebuild, the first
session's opening).

The price: after a batch that emptied its lag, a view whose next records arrive within one
sample has its clock counting from that batch rather than from their arrival, at most two
sample intervals earlier (``stall_after_s / 5`` each, at most 10 s). The other rule, the
earliest waiting since the last progress however long the view was idle in between, would flag
a view the moment work arrives after a long idle that followed a spurious waiting sample.

``running`` (:meth:`ViewHealth.caught_up`) still reads the latest sample as it is: an empty
poll with nothing waiting at that moment shows the session works; it is no stall evidence.
"""

from __future__ import annotations

from dataclasses import fields

VIEW_TASK_PREFIX = "view:"


def view_task(view: str) -> str:
    """The ``task`` label (and the thread's name) of live join view ``view``."""
    return f"{VIEW_TASK_PREFIX}{view}"


# After view_task: importing cdc.metrics runs its package, whose sampler imports view_task from
# here; when this module is the first imported, that finds it already defined.
from cdc.metrics.health import Health, TaskState  # noqa: E402

#: Not-waiting samples in a row that end a view's waiting period (a fewer is a flip).
SETTLED_SAMPLES = 2


class ViewTaskState(TaskState):
    """A view's :class:`TaskState` whose ``waiting``, the stall alarm's, lasts through a flip.

    ``waiting`` is set once per sample (:meth:`Health.waiting`) and reads as waiting until
    :data:`SETTLED_SAMPLES` samples in a row saw nothing waiting. The health moves
    ``waiting_since`` only when ``waiting`` turns from not waiting to waiting, so a flip leaves
    the start of the waiting period, and a stall, where they were.
    """

    # Class defaults: TaskState's __init__ sets ``waiting`` (the setter) before anything else;
    # before the first sample the view counts as settled not waiting.
    _sampled = False
    _quiet = SETTLED_SAMPLES  # the latest samples in a row that saw nothing waiting, capped

    @property
    def waiting(self) -> bool:
        return self._quiet < SETTLED_SAMPLES

    @waiting.setter
    def waiting(self, sample: bool) -> None:
        self._sampled = sample
        self._quiet = 0 if sample else min(self._quiet + 1, SETTLED_SAMPLES)

    @property
    def sampled(self) -> bool:
        """The latest sample as it is: work waited for the view when it was taken."""
        return self._sampled


def _view_state(health: Health, task: str) -> ViewTaskState:
    """``task``'s state in ``health``, a :class:`ViewTaskState` from now on.

    ``Health`` has no hook for a task's own waiting rule, so the view's state replaces the
    plain one in its table (under its lock), with what that one held: the view task builds its
    ``ViewHealth`` before the sampler starts, so nothing was sampled yet in practice.
    """
    health.task(task)  # registers it: its cdc_task_stalled series at 0
    with health._lock:
        plain = health._tasks[task]
        if not isinstance(plain, ViewTaskState):
            held = {f.name: getattr(plain, f.name) for f in fields(plain)}
            health._tasks[task] = plain = ViewTaskState(**held)
        return plain


class ViewHealth:
    """One view task's reports to ``health``."""

    def __init__(self, health: Health, view: str) -> None:
        self._health = health
        self._task = view_task(view)
        self._opened = False
        self._state = _view_state(health, self._task)
        health.set_state(self._task, "starting")

    def serving(self) -> None:
        """A session opened; only the first opens the task: a later one (after a retry) is
        no progress, so it leaves a stall in place."""
        if not self._opened:
            self._opened = True
            self._health.opened(self._task)

    def rebuilding(self) -> None:
        """A piece of the state topic went into the local store."""
        self._health.progress(self._task)

    def committed(self) -> None:
        """A batch committed: progress, and running again after retries."""
        self.caught_up()
        self._health.progress(self._task)

    def caught_up(self) -> None:
        """A poll found nothing to read and the sampler's latest sample saw nothing waiting:
        the session works, running again after retries. (An empty poll alone proves nothing:
        on Kafka a new session's first polls are empty while its consumer joins the group,
        records waiting or not.)"""
        state = self._state
        if state.state != "running" and not state.sampled:
            self._health.set_state(self._task, "running")

    def retrying(self, error: BaseException) -> None:
        self._health.set_state(self._task, "retrying", error)

    def stopped(self, error: BaseException) -> None:
        self._health.set_state(self._task, "stopped", error)
