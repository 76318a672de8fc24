"""Snapshot progress stored per table (cdc.contracts.snapshot_offsets, snapshots.state): a commit
stores only what it changed, a table whose progress goes is deleted, the old single-key form is read
and rewritten (pure)."""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

import orjson
from rich.console import Console

from cdc.contracts import snapshot_offsets as so
from cdc.metrics.progress import StreamWatch
from cdc.metrics.snapshot_report import request_finished, snapshot_report
from snapshots.chunks import key_chunks
from snapshots.state import SnapshotState


def stored_after(stored: dict[str, Any], commit: dict[str, Any]) -> dict[str, Any]:
    """``stored`` once a log committed ``commit`` (``None`` deletes a key, as both logs do)."""
    out = {**stored, **orjson.loads(orjson.dumps(commit))}
    return {k: v for k, v in out.items() if v is not None}


def planned(tables: int, chunks: int = 3) -> SnapshotState:
    state = SnapshotState()
    state.begin_initial("s1", 10)
    bounds = [(str(i),) for i in range(chunks - 1)]
    for i in range(tables):
        state.plan_table(f"public.t{i}", "initial", "keyset", key_chunks(bounds), request="s1")
    return state


def test_a_chunk_commit_stores_its_table_alone() -> None:
    state = planned(50)
    first = state.offsets(progress=True)
    assert len([k for k in first if k.startswith(so.TABLE_PREFIX)]) == 50
    assert "tables" not in first[so.RUN_KEY]
    state.chunk_done("public.t7", 0, 10)
    assert state.offsets() == {so.table_key("public.t7"): state.table("public.t7")}
    state.chunk_done("public.t7", 1, 10)
    # the exported snapshot stores the small run entry with every commit, never the others
    assert set(state.offsets(progress=True)) == {so.RUN_KEY, so.table_key("public.t7")}


def test_the_request_finishes_with_its_last_table_and_a_finished_table_drops_its_plan() -> None:
    state = planned(3, chunks=2)
    stored = stored_after({}, state.offsets())
    for table in ("public.t0", "public.t1", "public.t2"):
        for chunk in (0, 1):
            state.chunk_done(table, chunk, 5)
        stored = stored_after(stored, state.offsets())
        assert request_finished(stored, "s1") == (table == "public.t2")
    assert stored[so.table_key("public.t0")]["chunks"] == []  # bounded: the plan goes
    assert [r["state"] for r in snapshot_report(stored)] == ["done"] * 3


def test_a_table_whose_progress_goes_is_deleted_from_the_stored_state() -> None:
    state = planned(3)
    stored = stored_after({}, state.offsets())
    state.fail("public.t1", "s1", None, "boom")
    state.forget(["public.t2"])
    stored = stored_after(stored, state.offsets())
    assert set(so.progress(stored)["tables"]) == {"public.t0"}  # type: ignore[index]
    state.begin_initial("s2", 20)  # a fresh initial snapshot drops every table's progress
    stored = stored_after(stored, state.offsets())
    assert not [k for k in stored if k.startswith(so.TABLE_PREFIX)]
    assert stored[so.RUN_KEY]["id"] == "s2"


def test_each_queued_request_is_its_own_key_in_order_until_it_is_planned() -> None:
    state = SnapshotState()
    for i in (3, 1, 2):
        state.add_request({"id": f"r{i}", "table": f"public.t{i}", "where": None})
    stored = stored_after({}, state.offsets())
    assert {k for k in stored if k.startswith(so.REQUEST_PREFIX)} == {
        so.REQUEST_PREFIX + i for i in ("r1", "r2", "r3")
    }
    assert "requests" not in stored[so.RUN_KEY]
    again = SnapshotState.from_offsets(stored)  # a restart keeps the queue's order
    assert [r["id"] for r in again.requests()] == ["r3", "r1", "r2"]
    again.plan_table("public.t1", "incremental", "keyset", key_chunks([]), request="r1")
    planned_one = again.offsets()
    assert planned_one == {so.REQUEST_PREFIX + "r1": None, so.table_key("public.t1"): ANY}
    again.cancel(None)
    stored = stored_after(stored_after(stored, planned_one), again.offsets())
    assert not [k for k in stored if k.startswith(so.REQUEST_PREFIX)]


def test_the_old_single_key_form_is_read_then_rewritten_per_table() -> None:
    old = planned(4)
    old.chunk_done("public.t0", 0, 10)
    old.chunk_done("public.t2", 2, 10)
    old.add_request({"id": "q1", "table": "public.t9", "where": "id > 1"})
    # As a log written before per-table keys holds it: everything under "snapshot".
    stored = {"postgres": {"lsn": 10}, so.RUN_KEY: orjson.loads(orjson.dumps(old.to_json()))}
    assert so.migrated(stored)
    report = {r["table"]: r.get("chunks_done", r["state"]) for r in snapshot_report(stored)}
    assert report == {
        "public.t0": 1,
        "public.t1": 0,
        "public.t2": 1,
        "public.t3": 0,
        "public.t9": "queued",
    }

    state = SnapshotState.from_offsets(stored)
    remaining = {t: [c.index for c in cs] for t, cs in state.unfinished().items()}
    assert remaining["public.t0"] == [1, 2] and remaining["public.t2"] == [0, 1]
    assert state.pending  # the next commit rewrites it, whatever else it stores
    stored = stored_after(stored, state.offsets())
    assert not so.migrated(stored)
    assert len([k for k in stored if k.startswith(so.TABLE_PREFIX)]) == 4
    assert stored[so.REQUEST_PREFIX + "q1"]["where"] == "id > 1"
    again = SnapshotState.from_offsets(stored)
    assert {t: [c.index for c in cs] for t, cs in again.unfinished().items()} == remaining
    assert [r["id"] for r in again.requests()] == ["q1"]
    assert not again.pending


def test_readers_merge_every_form_and_keep_status_json_as_it_was() -> None:
    state = planned(2)
    whole = {so.RUN_KEY: state.to_json(), "postgres": {"lsn": 1}}
    split = stored_after({"postgres": {"lsn": 1}}, state.offsets())
    assert so.progress(split) == so.progress(whole) == state.to_json()
    assert so.folded(split) == whole
    assert so.without_progress(split) == {"postgres": {"lsn": 1}}
    assert so.progress({"postgres": {"lsn": 1}}) is None
    # a table's own key wins over an old run entry's copy of it (a log rewritten in part)
    newer = {**whole, so.table_key("public.t0"): {"rows": 7}}
    assert so.progress(newer)["tables"]["public.t0"] == {"rows": 7}  # type: ignore[index]


def test_the_stream_display_and_status_show_the_position_without_any_progress_key() -> None:
    state = planned(2)
    stored = stored_after({"postgres": {"lsn_str": "0/10", "lsn": 16}}, state.offsets())
    console = Console(width=200, record=True, color_system=None)
    console.print(StreamWatch().render(stored))
    assert "position postgres 0/10," in console.export_text()
    assert so.stream_offsets(stored) == {"postgres": {"lsn_str": "0/10", "lsn": 16}}


def test_an_old_queue_without_seq_keeps_its_order_once_stored_per_request() -> None:
    # A log written before per-request keys: the queue is a list, its order the only order.
    requests = [{"id": f"r{i}", "table": f"public.t{i}", "where": None} for i in (3, 1, 2)]
    stored = {so.RUN_KEY: {"id": "s1", "tables": {}, "requests": requests}}
    state = SnapshotState.from_offsets(stored)
    assert [r["id"] for r in state.requests()] == ["r3", "r1", "r2"]
    for _ in range(2):  # stored per request, read back: in whatever order the keys come
        stored = stored_after(stored, state.offsets())
        shuffled = dict(sorted(stored.items(), reverse=True))
        state = SnapshotState.from_offsets(shuffled)
        assert [r["id"] for r in state.requests()] == ["r3", "r1", "r2"]
