"""The snapshot progress format's one codec (cdc.contracts.snapshot_offsets): records stored by
the writers before the codec owned the format still decode into the typed views, and today's
writers (PostgreSQL's SnapshotState, MongoDB's mirror) store the very same bytes (pure)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import snapshots.state as state_module
from cdc.contracts import snapshot_offsets as so
from cdc.metrics.snapshot_report import request_outcome, snapshot_report
from connectors.mongodb import snapshot as mongo_snapshot
from snapshots.chunks import key_chunks, page_chunks

#: Stored by snapshots.state before this codec built its entries (one value per source-offsets
#: key, as both logs store them), on a clock that ticked a second per call.
STORED_BEFORE: dict[str, bytes] = {
    "snapshot.table/public.d": b'{"kind":"incremental","request":"r2","method":"keyset",'
    b'"where":null,"chunks":[],"chunks_total":1,"done":[[0,0]],"rows":3,'
    b'"started_ms":1700000006000,"updated_ms":1700000008000,"rows_per_s":1.5,"eta_s":0.0,'
    b'"purge":true}',
    "snapshot.table/public.b": b'{"kind":"initial","request":"s1","method":"ctid","where":null,'
    b'"chunks":[{"i":0,"pages":[0,5]},{"i":1,"pages":[5,null]}],"chunks_total":2,"done":[],'
    b'"rows":0,"started_ms":1700000002000,"updated_ms":1700000003000,"rows_per_s":0.0,'
    b'"eta_s":null}',
    "snapshot.table/public.a": b'{"kind":"initial","request":"s1","method":"keyset","where":null,'
    b'"chunks":[{"i":0,"lo":null,"hi":["10"]},{"i":1,"lo":["10"],"hi":["20"]},'
    b'{"i":2,"lo":["20"],"hi":null}],"chunks_total":3,"done":[[0,0],[2,2]],"rows":17,'
    b'"started_ms":1700000000000,"updated_ms":1700000005000,"rows_per_s":3.4,"eta_s":2.5}',
    "snapshot.request/r1": b'{"id":"r1","table":"public.c","where":"id > 5","seq":1}',
    "snapshot": b'{"id":"r4","consistent_point":12345678,"finished":["r2"],"failed":[{"id":"r3",'
    b'"table":"public.e","where":null,"reason":"boom: password=***","rows":0,'
    b'"failed_ms":1700000009000}],"cancelled":["r4"]}',
    "captured": b'["public.a","public.b"]',
}

#: MongoDB's mirror as its source stored it before the codec built it (a running snapshot).
MIRROR_BEFORE = (
    b'{"snapshot":{"tables":{"db.c":{"kind":"initial","method":"_id ranges","chunks_total":2,'
    b'"done":[[0,0]],"rows":12,"rows_per_s":3.5,"eta_s":2.0,"updated_ms":1700000500000,'
    b'"request":null}},"requests":[],"finished":["q0"]}}'
)

#: The form logs held before each table had a key of its own: everything under "snapshot".
SINGLE_KEY_BEFORE = (
    b'{"id":"s1","consistent_point":7,"finished":[],"failed":[],"cancelled":[],'
    b'"tables":{"public.t":{"kind":"initial","request":"s1","method":"keyset","where":null,'
    b'"chunks":[{"i":1,"lo":["5"],"hi":null}],"chunks_total":2,"done":[[0,0]],"rows":5,'
    b'"started_ms":1,"updated_ms":2,"rows_per_s":1.0,"eta_s":3.0}},'
    b'"requests":[{"id":"r9","table":"public.u","where":null}]}'
)


def decoded(stored: dict[str, bytes]) -> dict[str, Any]:
    return {key: orjson.loads(value) for key, value in stored.items()}


def test_records_stored_before_decode_into_the_typed_view() -> None:
    view = so.read(decoded(STORED_BEFORE))
    assert view is not None
    assert [t.table for t in view.tables] == ["public.a", "public.b", "public.d"]
    a, b, d = view.tables
    assert (a.chunks_done, a.chunks_total, a.rows, a.rows_per_s, a.eta_s) == (2, 3, 17, 3.4, 2.5)
    assert (a.kind, a.method, a.request, a.updated_ms, a.done) == (
        "initial",
        "keyset",
        "s1",
        1700000005000,
        False,
    )
    assert (b.chunks_done, b.done) == (0, False)
    assert (d.chunks_done, d.done, d.kind) == (1, True, "incremental")
    assert view.queued == (so.QueuedRequest("r1", "public.c"),)
    failure = so.FailedRequest("r3", "public.e", None, "boom: password=***", 0, 1700000009000)
    assert view.failed == (failure,)
    assert (view.finished, view.cancelled) == (("r2",), ("r4",))
    outcomes = [view.outcome(r) for r in ("r1", "r2", "r3", "r4")]
    assert outcomes == [None, "done", "failed: boom: password=***", "cancelled"]


def test_the_report_and_the_outcome_read_the_stored_records_through_the_view() -> None:
    offsets = decoded(STORED_BEFORE)
    rows = snapshot_report(offsets)
    assert [(r["table"], r["state"]) for r in rows] == [
        ("public.a", "running"),
        ("public.b", "running"),
        ("public.d", "done"),
        ("public.c", "queued"),
        ("public.e", "failed"),
    ]
    assert rows[2]["eta_s"] is None  # a finished table shows no ETA, whatever was stored
    assert request_outcome(offsets, "r3") == "failed: boom: password=***"


def test_the_single_key_form_from_before_per_table_keys_still_decodes() -> None:
    view = so.read({so.RUN_KEY: orjson.loads(SINGLE_KEY_BEFORE)})
    assert view is not None
    [table] = view.tables
    assert (table.table, table.chunks_done, table.chunks_total, table.rows) == ("public.t", 1, 2, 5)
    assert view.queued == (so.QueuedRequest("r9", "public.u"),)


def test_the_mirror_stored_before_decodes_and_is_written_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = so.read(orjson.loads(MIRROR_BEFORE))
    assert view is not None
    [table] = view.tables
    assert (table.table, table.chunks_done, table.chunks_total, table.rows) == ("db.c", 1, 2, 12)
    assert (table.kind, table.request, view.finished) == ("initial", None, ("q0",))
    monkeypatch.setattr(mongo_snapshot, "now_ms", lambda: 1_700_000_500_000)
    ranges = [{"lo": None, "hi": "x", "done": True}, {"lo": "x", "hi": None, "done": False}]
    info = {"ranges": ranges, "rows": 12, "rows_per_s": 3.5, "eta_s": 2.0}
    running = {"id": "m1", "request": None, "collections": {"db.c": info}}
    entry = {"snapshot": running, "finished_requests": ["q0"]}
    assert orjson.dumps(mongo_snapshot.mirror(entry)) == MIRROR_BEFORE


def written_on_a_fixed_clock(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(state_module, "now_ms", lambda: 1_700_000_000_000)
    state = state_module.SnapshotState()
    state.begin_initial("s1", 12345678)
    state.set_captured(["public.b", "public.a"])
    state.plan_table("public.a", "initial", "keyset", key_chunks([("10",), ("20",)]), request="s1")
    state.plan_table("public.b", "initial", "ctid", page_chunks(10, 1000, 500), request="s1")
    state.chunk_done("public.a", 0, 10)
    state.chunk_done("public.a", 2, 7)
    state.add_request({"id": "r1", "table": "public.c", "where": "id > 5"})
    state.add_request({"id": "r2", "table": "public.d", "where": None})
    state.plan_table("public.d", "incremental", "keyset", key_chunks([]), request="r2", purge=True)
    state.chunk_done("public.d", 0, 3)
    state.add_request({"id": "r3", "table": "public.e", "where": None})
    state.fail("public.e", "r3", None, "boom: password=secret")
    state.add_request({"id": "r4", "table": "public.f", "where": None})
    state.cancel("r4")
    return state.offsets(progress=True)


def test_the_writer_stores_the_bytes_it_stored_before(monkeypatch: pytest.MonkeyPatch) -> None:
    # Taken from snapshots.state as it was before the codec built its entries, on this clock.
    plan = b'"started_ms":1700000000000,"updated_ms":1700000000000,"rows_per_s":0.0,"eta_s":null'
    expected = {
        "captured": b'["public.a","public.b"]',
        "snapshot": STORED_BEFORE["snapshot"].replace(b"1700000009000", b"1700000000000"),
        "snapshot.request/r1": STORED_BEFORE["snapshot.request/r1"],
        "snapshot.request/r2": None,
        "snapshot.request/r3": None,
        "snapshot.request/r4": None,
        "snapshot.table/public.a": b'{"kind":"initial","request":"s1","method":"keyset",'
        b'"where":null,"chunks":[{"i":0,"lo":null,"hi":["10"]},{"i":1,"lo":["10"],"hi":["20"]},'
        b'{"i":2,"lo":["20"],"hi":null}],"chunks_total":3,"done":[[0,0],[2,2]],"rows":17,'
        + plan
        + b"}",
        "snapshot.table/public.b": b'{"kind":"initial","request":"s1","method":"ctid",'
        b'"where":null,"chunks":[{"i":0,"pages":[0,5]},{"i":1,"pages":[5,null]}],'
        b'"chunks_total":2,"done":[],"rows":0,' + plan + b"}",
        "snapshot.table/public.d": b'{"kind":"incremental","request":"r2","method":"keyset",'
        b'"where":null,"chunks":[],"chunks_total":1,"done":[[0,0]],"rows":3,'
        + plan
        + b',"purge":true}',
    }
    written = written_on_a_fixed_clock(monkeypatch)
    assert {k: None if v is None else orjson.dumps(v) for k, v in written.items()} == expected


def test_what_the_writer_stores_reads_back_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    written = written_on_a_fixed_clock(monkeypatch)
    stored = {k: v for k, v in orjson.loads(orjson.dumps(written)).items() if v is not None}
    again = state_module.SnapshotState.from_offsets(stored)
    assert so.progress(stored) == again.to_json()
    assert so.read(stored) == so.read({so.RUN_KEY: again.to_json()})
    assert again.captured() == ["public.a", "public.b"]
