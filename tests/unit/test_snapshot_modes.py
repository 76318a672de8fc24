"""Which snapshot a start needs, for every mode and start state."""

from __future__ import annotations

import pytest

from connectors.postgres.snapshot.modes import StartState, decide
from snapshots.modes import Action

FRESH = StartState(stored_lsn=None, slot_exists=False, confirmed_lsn=None, unfinished=False)
HEALTHY = StartState(stored_lsn=100, slot_exists=True, confirmed_lsn=100, unfinished=False)
LOST = StartState(stored_lsn=100, slot_exists=False, confirmed_lsn=None, unfinished=False)
AHEAD = StartState(stored_lsn=100, slot_exists=True, confirmed_lsn=200, unfinished=False)
UNFINISHED = StartState(stored_lsn=100, slot_exists=True, confirmed_lsn=100, unfinished=True)


@pytest.mark.parametrize(
    ("mode", "start", "action"),
    [
        ("initial", FRESH, Action.EXPORT),
        ("initial", HEALTHY, Action.STREAM),
        ("initial", LOST, Action.STREAM),  # the stream fails loudly on the lost slot
        ("initial", AHEAD, Action.STREAM),
        ("never", FRESH, Action.STREAM),
        ("never", HEALTHY, Action.STREAM),
        ("always", FRESH, Action.EXPORT),
        ("always", HEALTHY, Action.WATERMARK_ALL),
        ("always", LOST, Action.EXPORT),
        ("when_needed", FRESH, Action.EXPORT),
        ("when_needed", HEALTHY, Action.STREAM),
        ("when_needed", LOST, Action.EXPORT),
        ("when_needed", AHEAD, Action.WATERMARK_ALL),
        ("initial", UNFINISHED, Action.RESUME),
        ("never", UNFINISHED, Action.RESUME),
        ("always", UNFINISHED, Action.RESUME),
    ],
)
def test_decisions(mode: str, start: StartState, action: Action) -> None:
    decision = decide(mode, start)
    assert decision.action is action
    assert decision.reason


def test_an_existing_slot_without_a_position_is_snapshotted_again() -> None:
    start = StartState(stored_lsn=None, slot_exists=True, confirmed_lsn=50, unfinished=False)
    assert decide("initial", start).action is Action.EXPORT
