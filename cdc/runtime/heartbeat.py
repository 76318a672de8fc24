"""Whether a pipeline's processes run: what ``cdc status`` needs to tell the truth.

The log cannot tell whether a process is alive, so each ``cdc run`` (and ``cdc sink``)
process says so itself: every :data:`EVERY_S` it writes a *beat* to the control topic
(``<pipeline>.__sinks``, :mod:`cdc.runtime.sink_control`), keyed by its role and sinks, and on
a clean stop one that says ``stopped``. A process whose last beat is older than
:func:`stale_after_s` was killed (or lost the log): ``cdc status`` then shows its snapshot
paused, not running with an ETA, and its sinks not running, whatever state they last recorded.

A beat is best effort: the log away for a while only makes the process look gone for that
while, and the thread never takes the pipeline down.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from cdc.log.base import Log, Record
from cdc.log.offsets import end_offsets
from cdc.runtime.sink_control import control_topic
from cdc.support.clock import now_ms
from cdc.support.logging import Logger

EVERY_S = 5.0
CHANGE_WAIT_S = 0.2  # how soon a change (a view's state) is beaten
KIND = "process"
RUNNING, STOPPED, GONE = "running", "stopped", "gone"


def stale_after_s(every_s: float) -> float:
    """Three missed beats, plus slack for a process busy for a moment (a GC, a slow commit)."""
    return 3 * every_s + 5.0


class Heartbeat:
    """The thread that writes this process's beats until ``stop`` is set, then ``stopped``.

    Args:
        role: ``cdc run``'s role (``all``, ``source``, ``sinks``).
        sinks: the sinks this process runs (``None``: every sink of the pipeline).
        consistent: each of its sinks' consistent source position, as text, put in every beat
            (``cdc status``, ``cdc wait``; :mod:`cdc.runtime.consistency`).
        views: by name, the state of each live join view it runs (``{"state", "reason"}``,
            :meth:`cdc.views.task.ViewTask.report`), put in every beat (``cdc status``).
        changed: set when something a beat carries changed (a view's state): the next beat
            is written at once rather than up to ``every_s`` later.
        started_ms: when the run started (default: now), before its tasks did.
    """

    def __init__(
        self,
        log: Log,
        pipeline: str,
        role: str,
        sinks: Sequence[str] | None,
        stop: threading.Event,
        logger: Logger,
        every_s: float = EVERY_S,
        consistent: Callable[[], dict[str, str]] | None = None,
        views: Callable[[], dict[str, dict[str, str | None]]] | None = None,
        changed: threading.Event | None = None,
        started_ms: int | None = None,
    ) -> None:
        self._log = log
        self._consistent = consistent
        self._views = views
        self._changed = changed if changed is not None else threading.Event()
        self._topic = control_topic(pipeline)
        self._key = orjson.dumps(
            {"kind": KIND, "role": role, "sinks": None if sinks is None else sorted(sinks)},
            option=orjson.OPT_SORT_KEYS,
        )
        self._value = {
            "role": role,
            "sinks": None if sinks is None else sorted(sinks),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "every_s": every_s,
            # When the run started, before any of its tasks: status compares a sink's recorded
            # state with it (cdc.cli.status_liveness), and a sink opens before this beat exists.
            "started_ms": started_ms if started_ms is not None else now_ms(),
        }
        self._stop = stop
        self._logger = logger
        self._every_s = every_s
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        """Let the ``stopped`` beat be written, for at most ``timeout_s``."""
        self._thread.join(timeout_s)

    def _run(self) -> None:
        self._beat(RUNNING)
        last = time.monotonic()
        # Short waits, so a change is beaten within one (a beat is written only when due).
        while not self._stop.wait(min(CHANGE_WAIT_S, self._every_s)):
            if self._changed.is_set() or time.monotonic() - last >= self._every_s:
                self._changed.clear()
                self._beat(RUNNING)
                last = time.monotonic()
        self._beat(STOPPED)

    def _beat(self, state: str) -> None:
        beat: dict[str, Any] = {**self._value, "state": state, "beat_ms": now_ms()}
        if self._consistent is not None:
            beat["consistent"] = self._consistent()
        if self._views is not None:
            beat["views"] = self._views()
        value = orjson.dumps(beat)
        try:
            self._log.ensure_topics([self._topic])
            tx = self._log.begin()
            try:
                tx.append([Record(self._topic, self._key, value)])
                tx.commit()
            except BaseException:
                tx.abort()
                raise
        except Exception as exc:  # the log away: status shows the process gone meanwhile
            if not self._failing:
                self._logger.warning("heartbeat.unavailable", error=str(exc))
            self._failing = True
            return
        self._failing = False


def processes(log: Log, pipeline: str, now: int | None = None) -> list[dict[str, Any]]:
    """Every process that ever beat for ``pipeline``, with ``state`` as of ``now``:
    ``running``, ``stopped`` (a clean stop) or ``gone`` (no beat for too long)."""
    topic, latest = control_topic(pipeline), {}
    for partition, end in end_offsets(log, topic).items():
        offset = 0
        while offset < end:
            records = log.read(topic, partition, offset, 1000)
            if not records:
                break
            for record in records:
                if record.key is None or record.value is None:
                    continue
                if orjson.loads(record.key).get("kind") == KIND:
                    latest[record.key] = orjson.loads(record.value)
            offset = records[-1].offset + 1
    now = now_ms() if now is None else now
    return [_as_of(value, now) for value in latest.values()]


def _as_of(value: dict[str, Any], now: int) -> dict[str, Any]:
    age_s = (now - int(value.get("beat_ms") or 0)) / 1000
    state = value.get("state")
    if state == RUNNING and age_s > stale_after_s(float(value.get("every_s") or EVERY_S)):
        state = GONE
    return {**value, "state": state, "last_seen_s": round(age_s, 1)}


def runs_source(found: list[dict[str, Any]]) -> bool:
    """A running process runs the pipeline's source."""
    return any(p["state"] == RUNNING and p.get("role") in ("all", "source") for p in found)


def view_state(found: list[dict[str, Any]], view: str) -> dict[str, Any] | None:
    """``view``'s state as the running process that runs it last beat it (``None``: no running
    process says: none runs the source, or one of a version whose beats carry no views)."""
    for process in found:
        if process["state"] == RUNNING and view in (process.get("views") or {}):
            return dict(process["views"][view])
    return None


def runs_sink(found: list[dict[str, Any]], sink: str) -> bool:
    """A running process runs ``sink``."""
    return bool(serving(found, sink))


def serving(found: list[dict[str, Any]], sink: str) -> list[dict[str, Any]]:
    """The running processes that run ``sink``."""
    return [
        p
        for p in found
        if p["state"] == RUNNING
        and p.get("role") in ("all", "sinks")
        and (p.get("sinks") is None or sink in p["sinks"])
    ]
