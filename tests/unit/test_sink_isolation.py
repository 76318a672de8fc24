"""A sink's error stops that sink alone; a table reset requested in the log starts it again.

On the real embedded log, with the shipped in-memory reference sink (cdc.testing), wrapped so
it can be made to fail: the behaviour under test is the runtime's (``SinkTask.serve``, the
control topic, the reset protocol), not a store's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.errors import SinkFatal
from cdc.contracts.events import topic_name
from cdc.contracts.sink import Sink, SinkRecord
from cdc.contracts.source import SourceBatch
from cdc.log.base import TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.control_watcher import ControlWatcher
from cdc.runtime.sink_control import APPLIED, DONE, FAILED, SinkControl
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.support.logging import get_logger
from cdc.testing import ScriptedSource, make_event, wait_until
from cdc.testing.memory_sink import MemorySink, MemoryStore
from tests.unit.test_runtime import run_source

TOPIC = topic_name("p", "public", "items")


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EmbeddedLog]:
    log = EmbeddedLog(tmp_path / "log", partitions=2)
    yield log
    log.close()


class Breakable(MemorySink):
    """The memory sink; while ``broken`` is set, every flush fails for good."""

    def __init__(self, store: MemoryStore, broken: threading.Event) -> None:
        super().__init__(store)
        self.broken = broken

    def flush(self) -> None:
        if self.broken.is_set():
            self._pending = []
            raise SinkFatal("the warehouse cannot take this change")
        super().flush()

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        super().reset_table(table, partitions)
        self.broken.clear()  # what a reset repairs: the table is rebuilt in the new shape


class NoOffsets(MemorySink):
    def stored_offsets(self) -> Mapping[TopicPartition, int] | None:
        return None


def fill(log: EmbeddedLog, keys: range) -> None:
    batches = [
        SourceBatch(events=[make_event(k, position=k)], commit_offsets={"s": k}) for k in keys
    ]
    assert run_source(log, ScriptedSource(batches)) is None


def task(
    log: EmbeddedLog, name: str, factory: Callable[[], Sink], stop: threading.Event
) -> SinkTask:
    return SinkTask(
        "p",
        name,
        log,
        factory,
        [TOPIC],
        stop,
        get_logger(sink=name),
        max_records=3,
        poll_timeout_s=0.05,
        control=watcher(log, stop),
        tables=[("public", "items")],
    )


def watcher(log: EmbeddedLog, stop: threading.Event) -> ControlWatcher:
    """The process's watcher of the control topic (one per task here: as if each ran alone)."""
    found = ControlWatcher(log, "p", stop, get_logger(), every_s=0.1)
    found.start()
    return found


def committed(log: EmbeddedLog, sink: str) -> int:
    return sum(log.committed_offsets(group_name("p", sink)).values())


WAIT_S = 20


def serve(*tasks: SinkTask) -> list[threading.Thread]:
    threads = [threading.Thread(target=t.serve, daemon=True) for t in tasks]
    for thread in threads:
        thread.start()
    return threads


def test_a_failing_sink_stops_alone_and_says_why(log: EmbeddedLog) -> None:
    fill(log, range(1, 6))
    stop, broken = threading.Event(), threading.Event()
    broken.set()
    good_store, bad_store = MemoryStore(), MemoryStore()
    good = task(log, "good", lambda: MemorySink(good_store), stop)
    bad = task(log, "bad", lambda: Breakable(bad_store, broken), stop)
    threads = serve(good, bad)
    wait_until(lambda: bad.failure is not None and committed(log, "good") == 5, WAIT_S)
    fill(log, range(6, 9))  # the source goes on, and so does the good sink
    wait_until(lambda: committed(log, "good") == 8, WAIT_S)
    assert all(thread.is_alive() for thread in threads)  # serve() did not raise
    state = SinkControl(log, "p").state("bad")
    assert state is not None and state["state"] == "stopped"
    assert "cannot take this change" in state["reason"] and state["error_type"] == "SinkFatal"
    assert (SinkControl(log, "p").state("good") or {})["state"] == "running"
    assert committed(log, "bad") == 0 and not bad_store.rows  # its offsets stayed: nothing lost
    stop.set()
    for thread in threads:
        thread.join(5)
    assert not any(thread.is_alive() for thread in threads)


def test_a_reset_starts_a_stopped_sink_again_and_rebuilds_the_table(log: EmbeddedLog) -> None:
    fill(log, range(1, 6))
    stop, broken = threading.Event(), threading.Event()
    broken.set()
    store = MemoryStore()
    bad = task(log, "bad", lambda: Breakable(store, broken), stop)
    (thread,) = serve(bad)
    wait_until(lambda: bad.failure is not None, WAIT_S)
    control = SinkControl(log, "p")
    request = control.request_reset("bad", "public.items")
    wait_until(lambda: (control.find("bad", request.id) or request).state == DONE, WAIT_S)
    assert bad.failure is None and len(store.rows) == 5
    assert (control.state("bad") or {})["state"] == "running"
    assert committed(log, "bad") == 5
    stop.set()
    thread.join(5)


def test_a_reset_of_a_running_sink_reads_the_table_again(log: EmbeddedLog) -> None:
    fill(log, range(1, 6))
    stop = threading.Event()
    store = MemoryStore()
    resets: list[tuple[str, str]] = []

    class Counting(MemorySink):
        def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
            resets.append(table)
            assert not self._pending  # between batches: nothing written and not flushed
            super().reset_table(table, partitions)
            assert not store.rows

    running = task(log, "s", lambda: Counting(store), stop)
    (thread,) = serve(running)
    wait_until(lambda: committed(log, "s") == 5, WAIT_S)
    control = SinkControl(log, "p")
    request = control.request_reset("s", "public.items")
    wait_until(lambda: (control.find("s", request.id) or request).state == DONE, WAIT_S)
    assert resets == [("public", "items")] and len(store.rows) == 5
    applied = [r for r in control.resets("s") if r.id == request.id]
    assert applied[0].targets is not None and sum(applied[0].targets.values()) == 5
    stop.set()
    thread.join(5)


def test_a_reset_requested_while_nothing_runs_is_applied_at_the_next_start(
    log: EmbeddedLog,
) -> None:
    fill(log, range(1, 4))
    store = MemoryStore()
    stop = threading.Event()
    first = task(log, "s", lambda: MemorySink(store), stop)
    (thread,) = serve(first)
    wait_until(lambda: committed(log, "s") == 3, WAIT_S)
    stop.set()
    thread.join(5)
    store.rows[("p.public.items", "stale")] = {"id": -1}  # what the rebuild must drop
    request = SinkControl(log, "p").request_reset("s", "public.items")
    assert SinkControl(log, "p").find("s", request.id).state == "requested"  # type: ignore[union-attr]
    stop = threading.Event()
    (thread,) = serve(task(log, "s", lambda: MemorySink(store), stop))
    control = SinkControl(log, "p")
    wait_until(lambda: (control.find("s", request.id) or request).state == DONE, WAIT_S)
    assert ("p.public.items", "stale") not in store.rows and len(store.rows) == 3
    stop.set()
    thread.join(5)


def test_a_reset_the_sink_cannot_do_fails_with_the_reason(log: EmbeddedLog) -> None:
    fill(log, range(1, 3))
    stop = threading.Event()
    (thread,) = serve(task(log, "s", lambda: NoOffsets(MemoryStore()), stop))
    control = SinkControl(log, "p")
    unknown = control.request_reset("s", "public.other")
    no_offsets = control.request_reset("s", "public.items")
    wait_until(
        lambda: all((control.find("s", r.id) or r).state == FAILED for r in (unknown, no_offsets)),
        WAIT_S,
    )
    assert "does not hold table public.other" in str(control.find("s", unknown.id).reason)  # type: ignore[union-attr]
    assert "keeps no offsets" in str(control.find("s", no_offsets.id).reason)  # type: ignore[union-attr]
    assert (control.state("s") or {})["state"] == "running"
    stop.set()
    thread.join(5)


def test_a_rebuild_is_done_only_once_the_last_record_at_the_reset_is_applied(
    log: EmbeddedLog,
) -> None:
    fill(log, range(1, 11))
    gate, writing = threading.Event(), threading.Event()

    class Slow(MemorySink):
        def write(self, records: Sequence[SinkRecord]) -> None:
            writing.set()
            gate.wait(10)
            super().write(records)

    store = MemoryStore()
    stop = threading.Event()
    control = SinkControl(log, "p")
    request = control.request_reset("s", "public.items")
    (thread,) = serve(task(log, "s", lambda: Slow(store), stop))
    wait_until(lambda: (control.find("s", request.id) or request).state == APPLIED, WAIT_S)
    wait_until(writing.is_set, WAIT_S)  # the rebuild has begun, held inside its first write
    assert (control.find("s", request.id) or request).state == APPLIED  # nothing applied yet
    gate.set()
    wait_until(lambda: (control.find("s", request.id) or request).state == DONE, WAIT_S)
    assert len(store.rows) == 10
    stop.set()
    thread.join(5)


class HangingControl:
    """The real log, except that reading the control topic hangs once ``hang`` is set: what a
    Kafka admin request does while the broker restarts."""

    def __init__(self, inner: EmbeddedLog, hang: threading.Event, release: threading.Event):
        self._inner, self._hang, self._release = inner, hang, release
        self.hanging = threading.Event()  # a read of the control topic has begun to hang

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def end_offsets(self, topic: str) -> dict[int, int]:
        if topic.endswith(".__sinks") and self._hang.is_set():
            self.hanging.set()
            self._release.wait(30)
        return self._inner.end_offsets(topic)


def test_a_sink_never_waits_on_the_control_topic(log: EmbeddedLog) -> None:
    fill(log, range(1, 4))
    hang, release = threading.Event(), threading.Event()
    slow: Any = HangingControl(log, hang, release)
    stop = threading.Event()
    store = MemoryStore()
    control = ControlWatcher(slow, "p", stop, get_logger(), every_s=0.05)
    control.start()
    running = SinkTask(
        "p", "s", slow, lambda: MemorySink(store), [TOPIC], stop, get_logger(),
        max_records=3, poll_timeout_s=0.05, control=control,
    )  # fmt: skip
    thread = threading.Thread(target=running.serve, daemon=True)
    thread.start()
    wait_until(lambda: committed(log, "s") == 3, WAIT_S)
    hang.set()  # from now on the watcher hangs in its reads
    wait_until(slow.hanging.is_set, WAIT_S)
    fill(log, range(4, 10))
    wait_until(lambda: committed(log, "s") == 9, timeout_s=10)  # the sink goes on meanwhile
    started = time.monotonic()
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 2  # and stops at once
    release.set()
    # The watcher ends too before the fixture closes the log: a thread still reading a log
    # while it closes every thread's connection crashed the interpreter (CI, once).
    control.join(5)


def test_a_control_write_that_always_fails_is_dropped_not_retried_forever(
    log: EmbeddedLog,
) -> None:
    # A write failing with anything but a log error would fail every time: it must not hold
    # up the writes queued behind it, nor the reads of reset requests.
    SinkControl(log, "p", create=True)
    stop = threading.Event()
    control = watcher(log, stop)
    try:
        wait_until(lambda: control.ready.is_set(), WAIT_S)

        def poison(_: SinkControl) -> None:
            raise ValueError("cannot encode this state")

        control.post(poison)
        control.post(lambda c: c.set_state("after", "running"))
        wait_until(
            lambda: (SinkControl(log, "p").state("after") or {}).get("state") == "running", WAIT_S
        )
        request = SinkControl(log, "p").request_reset("after", "public.items")
        wait_until(lambda: [r.id for r in control.pending("after")] == [request.id], WAIT_S)
    finally:
        stop.set()
        control.join(5)
