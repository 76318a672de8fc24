"""What a view task tells the pipeline's health (:mod:`cdc.metrics.health`): the task
``view:<name>`` in ``/readyz``, ``cdc_task_stalled`` and ``cdc_last_progress_timestamp_seconds``.

- ``starting`` from its creation (``/readyz``: not open yet, as a sink before it opened);
- open once its first session has opened its store and its consumer (a rebuild of the store
  from the state topic comes before: each piece read is progress, not a stall);
- progress each time a batch commits (its group's offsets moved);
- ``retrying`` with the error while a retriable error restarts its sessions, ``running`` again
  once a batch committed, or a poll found nothing while the sampler's latest sample saw nothing
  waiting;
- ``stopped`` with the error that ended it (the process stops too: a view's error is fatal);
- ``standby`` on Kafka while another process holds the view's lease (:mod:`cdc.views.standby`):
  ready, and no stall (the leader's lag is not its own), as a single-writer sink's standby.

That work waits for it (its lag is above 0) the sampler reads from ``cdc_view_lag_records``
(:mod:`cdc.metrics.sampler`), once per sample.

The stall clock and its rule against a flapping sample are the health's, as for every task
(:mod:`cdc.metrics.health`). ``running`` (:meth:`ViewHealth.caught_up`) reads the latest sample
as it is: an empty poll with nothing waiting at that moment shows the session works; it is no
stall evidence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc.metrics.registry import STANDBY

if TYPE_CHECKING:
    from cdc.metrics.health import Health

VIEW_TASK_PREFIX = "view:"


def view_task(view: str) -> str:
    """The ``task`` label (and the thread's name) of live join view ``view``."""
    return f"{VIEW_TASK_PREFIX}{view}"


class ViewHealth:
    """One view task's reports to ``health``."""

    def __init__(self, health: Health, view: str) -> None:
        self._health = health
        self._task = view_task(view)
        self._opened = False
        health.set_state(self._task, "starting")

    def serving(self) -> None:
        """A session opened; only the first opens the task: a later one (after a retry) is
        no progress, so it leaves a stall in place. A standby that leads again runs."""
        if not self._opened:
            self._opened = True
            self._health.opened(self._task)
        elif self._health.task(self._task).state == STANDBY:
            self._health.set_state(self._task, "running")

    def standby(self) -> None:
        """Another process holds the view's lease."""
        self._health.set_state(self._task, STANDBY)

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
        state = self._health.task(self._task)
        if state.state != "running" and not state.sampled:
            self._health.set_state(self._task, "running")

    def retrying(self, error: BaseException) -> None:
        self._health.set_state(self._task, "retrying", error)

    def stopped(self, error: BaseException) -> None:
        self._health.set_state(self._task, "stopped", error)
