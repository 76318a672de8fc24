"""Snapshot requests that fail or are cancelled, in the stored state and in what ``cdc status``
and ``cdc snapshot --wait`` read from it; the bounded retries of the one retry policy."""

from __future__ import annotations

import threading

import pytest
import structlog

from cdc.contracts.errors import SourceUnavailable
from cdc.metrics.snapshot_report import open_requests, request_outcome, snapshot_report
from cdc.support.retry import Backoff, retry_until_stopped
from snapshots.chunks import key_chunks
from snapshots.state import OFFSET_KEY, SnapshotState


def planned(state: SnapshotState, table: str, request: str) -> None:
    state.add_request({"id": request, "table": table, "where": None})
    state.plan_table(table, "incremental", "keyset", key_chunks([("10",)]), request=request)


def test_a_failed_request_keeps_its_reason_and_drops_its_plan() -> None:
    state = SnapshotState()
    planned(state, "public.t", "r1")
    state.chunk_done("public.t", 0, 10)
    assert state.fail("public.t", "r1", "id > 1", "division by zero") == "r1"
    data = state.to_json()
    assert "public.t" not in data["tables"] and state.unfinished() == {}
    [failure] = data["failed"]
    assert (failure["id"], failure["reason"], failure["rows"]) == ("r1", "division by zero", 10)
    assert state.ended("r1")
    assert not state.plan_table("public.t", "incremental", "ctid", [], request="r1")
    offsets = {OFFSET_KEY: data}
    assert request_outcome(offsets, "r1") == "failed: division by zero"
    [row] = snapshot_report(offsets)
    assert (row["state"], row["request"], row["reason"]) == ("failed", "r1", "division by zero")
    assert open_requests(offsets) == {"r1": "failed"}


def test_cancel_drops_queued_running_and_failed_requests_but_not_finished_ones() -> None:
    state = SnapshotState()
    planned(state, "public.done", "d")
    state.chunk_done("public.done", 0, 1)
    state.chunk_done("public.done", 1, 1)
    planned(state, "public.run", "r")
    state.add_request({"id": "q", "table": "public.q", "where": None})
    planned(state, "public.bad", "f")
    state.fail("public.bad", "f", None, "boom")
    dropped = state.cancel(None, "signal")
    assert sorted((d["id"], d["state"]) for d in dropped) == [
        ("f", "failed"),
        ("q", "queued"),
        ("r", "running"),
    ]
    data = state.to_json()
    assert list(data["tables"]) == ["public.done"] and data["requests"] == data["failed"] == []
    assert set(data["cancelled"]) == {"f", "q", "r", "signal"}
    assert state.fail("public.run", "r", None, "late") is None  # ended already
    offsets = {OFFSET_KEY: data}
    assert request_outcome(offsets, "signal") == "cancelled"
    assert request_outcome(offsets, "d") == "done"
    assert open_requests(offsets) == {}


def test_cancel_all_leaves_a_resumed_initial_snapshot_to_its_own_id() -> None:
    state = SnapshotState()
    state.begin_initial("s1", 100)
    state.plan_table("public.t", "initial", "keyset", key_chunks([("10",)]), request="s1")
    assert state.cancel(None) == []
    assert state.cancel("s1") == [{"id": "s1", "table": "public.t", "state": "running"}]


def test_retries_are_bounded_when_asked() -> None:
    calls = []

    def failing() -> None:
        calls.append(1)
        raise SourceUnavailable("connection lost")

    with pytest.raises(SourceUnavailable):
        retry_until_stopped(
            failing,
            threading.Event(),
            structlog.get_logger(),
            "test.retry",
            Backoff(initial_s=0.001),
            attempts=3,
        )
    assert len(calls) == 3

    def not_retriable() -> None:
        calls.append(1)
        raise ZeroDivisionError

    calls.clear()
    with pytest.raises(ZeroDivisionError):
        retry_until_stopped(not_retriable, threading.Event(), structlog.get_logger(), "t", None, 3)
    assert len(calls) == 1


def test_every_request_a_cancel_all_dropped_stays_ended_however_many() -> None:
    # The stored list of cancelled ids keeps only the last few; work the reader still has
    # queued may name any dropped request, and must find it ended.
    state = SnapshotState()
    for i in range(30):
        state.add_request({"id": f"r{i}", "table": f"public.t{i}", "where": None})
    assert len(state.cancel(None, "sig")) == 30
    assert all(state.ended(f"r{i}") for i in range(30))
    assert not state.plan_table("public.t0", "incremental", "keyset", [], request="r0")
    assert state.table("public.t0") is None


def test_a_resumed_initial_snapshot_that_fails_stops_the_reader_not_its_other_tables() -> None:
    from connectors.postgres.snapshot.channel import Channel
    from connectors.postgres.snapshot.incremental import WatermarkReader, Work
    from snapshots.watermark import Watermarks

    state = SnapshotState()
    for table in ("public.a", "public.b"):
        state.plan_table(table, "initial", "keyset", key_chunks([("10",)]), request="snap1")
    reader = WatermarkReader(
        "host=127.0.0.1 port=1 dbname=x",  # never connected: the plan fails before any read
        1.0,
        Channel("p"),
        Watermarks(),
        threading.Lock(),
        state,
        structlog.get_logger(),
    )

    def plan() -> list:  # type: ignore[type-arg]
        raise RuntimeError("the table went away")

    try:
        reader.submit(Work("snap1", "public.a", None, plan, initial=True))
        for _ in range(200):
            if reader.failure is not None:
                break
            threading.Event().wait(0.01)
    finally:
        reader.close()
    # The failure stops the run (the poll raises it), as an initial snapshot's always did; it
    # is not marked failed under the shared id, which would leave public.b unread for good.
    assert isinstance(reader.failure, RuntimeError)
    assert not state.ended("snap1") and state.failed() == []
    assert set(state.unfinished()) == {"public.a", "public.b"}


def test_a_burst_of_ddl_needs_no_second_read_while_the_first_is_unread() -> None:
    # The decision StreamSnapshots makes on each rewriting DDL (its state and windows only).
    from types import SimpleNamespace

    from connectors.postgres.snapshot.incremental import ChunkJob, OpenWindow
    from connectors.postgres.snapshot.streaming import StreamSnapshots

    state = SnapshotState()
    planned(state, "public.t", "r1")
    streams = SimpleNamespace(
        _state=state, _lock=threading.Lock(), _reader=SimpleNamespace(open_windows={})
    )

    def unread() -> bool:
        return StreamSnapshots._unread_plan(streams, "public.t")  # type: ignore[arg-type]

    assert unread()  # planned, nothing read: every chunk is read after the DDL
    job = ChunkJob(SimpleNamespace(name="public.t"), None, None, "r1")  # type: ignore[arg-type]
    streams._reader.open_windows["w"] = OpenWindow(job, threading.Event())
    assert not unread()  # a chunk's read may have begun before the DDL
    streams._reader.open_windows.clear()
    state.chunk_done("public.t", 0, 10)
    assert not unread()  # rows read (maybe before the DDL): read again
    assert not StreamSnapshots._unread_plan(streams, "public.other")  # type: ignore[arg-type]
