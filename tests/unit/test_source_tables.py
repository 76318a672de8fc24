"""Tables added to or removed from ``source.tables``: what the stored state records and what a
start does about them (pure)."""

from __future__ import annotations

from snapshots.chunks import key_chunks
from snapshots.modes import Action, added_tables, table_changes
from snapshots.state import CAPTURED_KEY, SnapshotState


def test_captured_tables_are_stored_under_their_own_key_only_when_they_change() -> None:
    state = SnapshotState.from_offsets({CAPTURED_KEY: ["public.b", "public.a"]})
    assert state.captured() == ["public.a", "public.b"]
    state.set_captured(["public.b", "public.a"])
    assert not state.pending and state.offsets() == {}
    state.set_captured(["public.a"])
    assert state.offsets() == {CAPTURED_KEY: ["public.a"]}
    assert SnapshotState().captured() is None  # stored before tables were recorded


def test_table_changes_and_what_a_start_does_about_added_tables() -> None:
    changes = table_changes(["public.a", "public.c"], ["public.a", "public.b"])
    assert (changes.added, changes.removed) == (["public.c"], ["public.b"])
    assert added_tables("initial", Action.STREAM).snapshot
    assert added_tables("when_needed", Action.RESUME).snapshot
    assert added_tables("always", Action.RESUME).snapshot
    assert not added_tables("always", Action.WATERMARK_ALL).snapshot  # read anyway
    assert not added_tables("initial", Action.EXPORT).snapshot  # read anyway
    never = added_tables("never", Action.STREAM)
    assert not never.snapshot and "never" in never.reason


def test_a_removed_table_is_forgotten_with_its_requests() -> None:
    state = SnapshotState()
    state.add_request({"id": "q", "table": "public.gone", "where": None})
    state.plan_table("public.gone", "incremental", "keyset", key_chunks([]), request="r")
    state.fail("public.gone", "r", None, "boom")
    state.add_request({"id": "k", "table": "public.kept", "where": None})
    state.forget(["public.gone"])
    data = state.to_json()
    assert data["tables"] == {} and data["failed"] == []
    assert [r["id"] for r in data["requests"]] == ["k"]
