"""Stored snapshot progress: plan, chunk completion, requests, round trip through JSON."""

from __future__ import annotations

import orjson

from cdc.metrics.snapshot_report import request_finished, snapshot_report
from snapshots.chunks import key_chunks
from snapshots.state import OFFSET_KEY, SnapshotState


def test_progress_round_trips_and_names_the_remaining_chunks() -> None:
    state = SnapshotState()
    state.begin_initial("s1", 1234)
    state.plan_table("public.t", "initial", "keyset", key_chunks([("10",), ("20",)]), request="s1")
    figures = state.chunk_done("public.t", 1, 10)
    assert figures["chunks_done"] == 1
    assert figures["chunks_total"] == 3
    stored = orjson.loads(orjson.dumps(state.offsets()))
    assert not state.dirty
    again = SnapshotState.from_offsets(stored)
    assert [c.index for c in again.unfinished()["public.t"]] == [0, 2]


def test_a_finished_table_forgets_its_plan_and_finishes_its_request() -> None:
    state = SnapshotState()
    state.add_request({"id": "r1", "table": "public.t", "where": None})
    assert state.requests()[0]["id"] == "r1"
    state.plan_table("public.t", "incremental", "ctid", key_chunks([]), request="r1")
    assert state.requests() == []
    state.chunk_done("public.t", 0, 5)
    data = state.to_json()
    assert data["tables"]["public.t"]["chunks"] == []
    assert state.unfinished() == {}
    assert request_finished({OFFSET_KEY: data}, "r1")
    [row] = snapshot_report({OFFSET_KEY: data})
    assert row["state"] == "done"
    assert row["chunks_done"] == row["chunks_total"] == 1
    assert row["rows"] == 5


def test_report_lists_queued_requests() -> None:
    state = SnapshotState()
    state.add_request({"id": "r2", "table": "public.u", "where": "id > 3"})
    report = snapshot_report({OFFSET_KEY: state.to_json()})
    assert report == [{"table": "public.u", "request": "r2", "state": "queued"}]
    assert snapshot_report({}) == []
