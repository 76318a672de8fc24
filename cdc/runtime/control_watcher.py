"""One thread per process between the sink tasks and the control topic.

Sink threads must never wait on the log for a report: on Kafka, reading a topic's offsets is an
admin request that can block for many seconds while a broker restarts, and a sink waiting there
would stop applying batches and miss the pipeline's stop. So one watcher thread follows
``<pipeline>.__sinks`` (:mod:`cdc.runtime.sink_control`) about once a second and keeps a snapshot
the sink tasks read without blocking, and it does the writes they post (their state, what became
of a reset), in order, retrying while the log is away.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from cdc.contracts.errors import CdcError
from cdc.log.base import Log
from cdc.runtime.sink_control import APPLIED, PENDING, Reset, SinkControl
from cdc.support.logging import Logger
from cdc.support.retry import Backoff

Write = Callable[[SinkControl], object]


class ControlWatcher:
    """Follows the control topic for this process's sink tasks, and writes for them.

    Args:
        log: the pipeline's log.
        pipeline: the pipeline's name.
        stop: the pipeline's stop event; the thread ends when it is set.
        every_s: how often the topic is read.
    """

    def __init__(
        self, log: Log, pipeline: str, stop: threading.Event, logger: Logger, every_s: float = 1.0
    ) -> None:
        self._control = SinkControl(log, pipeline)
        self._stop = stop
        self._logger = logger
        self._every_s = every_s
        self._lock = threading.Lock()
        self._resets: dict[str, list[Reset]] = {}
        self._writes: queue.Queue[Write] = queue.Queue()
        self._wake = threading.Event()
        self.ready = threading.Event()  # set once the topic was read through once
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sink-control", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        """Let queued writes finish, for at most ``timeout_s`` (the thread is a daemon)."""
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    # -- for the sink tasks: never blocks on the log ---------------------------------------------

    def pending(self, sink: str) -> list[Reset]:
        """``sink``'s requested resets, as of the last read."""
        with self._lock:
            return [r for r in self._resets.get(sink, []) if r.state == PENDING]

    def rebuilding(self, sink: str) -> list[Reset]:
        """``sink``'s applied resets whose rebuild is not done, as of the last read."""
        with self._lock:
            return [
                r
                for r in self._resets.get(sink, [])
                if r.state == APPLIED and r.targets is not None
            ]

    def post(self, write: Write) -> None:
        """Queue a write to the control topic; the watcher does it, retrying while needed."""
        self._writes.put(write)
        self._wake.set()

    # -- the thread ------------------------------------------------------------------------------

    def _loop(self) -> None:
        backoff = Backoff(initial_s=self._every_s, maximum_s=30.0)
        delay = 0.0
        last_error = ""
        while True:
            self._wake.wait(delay)
            self._wake.clear()
            try:
                self._write_queued()
                self._read()
            except CdcError as exc:  # the log away: keep the queue, try again later
                if str(exc) != last_error:
                    self._logger.warning("sink.control_unavailable", error=str(exc))
                last_error, delay = str(exc), backoff.next_delay()
            except Exception as exc:  # never let reports take a sink down
                self._logger.error("sink.control_failed", error=str(exc))
                delay = backoff.next_delay()
            else:
                last_error, delay = "", self._every_s
                backoff.reset()
            if self._stop.is_set() and self._writes.empty():
                return

    def _write_queued(self) -> None:
        while True:
            try:
                write = self._writes.queue[0]  # peek: it leaves the queue once written
            except IndexError:
                return
            try:
                write(self._control)
            except CdcError:
                raise  # the log is away: the write stays queued, to be tried again
            except Exception as exc:
                # A write that fails for another reason fails every time: dropped (and said),
                # so it cannot hold up the writes behind it nor the reads of reset requests.
                self._logger.error("sink.control_write_dropped", error=str(exc))
            self._writes.get_nowait()

    def _read(self) -> None:
        if self._stop.is_set():
            return
        self._control.refresh()
        sinks = self._control.sinks()
        snapshot = {sink: self._control.resets(sink, refresh=False) for sink in sinks}
        with self._lock:
            self._resets = snapshot
        self.ready.set()
