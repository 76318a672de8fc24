"""wait_until: the one polling wait of the product and the tests, run on a manual clock."""

from __future__ import annotations

import pytest

from cdc.support.wait import WaitTimeout, wait_until
from cdc.testing import ManualClock


def _counting(values: list[object]):
    """A predicate returning ``values`` one per call (the last one repeated)."""
    calls: list[object] = []

    def predicate() -> object:
        value = values[min(len(calls), len(values) - 1)]
        calls.append(value)
        return value

    return predicate, calls


def test_returns_the_predicates_first_truthy_value() -> None:
    clock = ManualClock()
    predicate, calls = _counting([None, 0, [], {"lsn": 7}])
    assert wait_until(predicate, 10, 0.5, clock=clock) == {"lsn": 7}
    assert len(calls) == 4
    assert clock.sleeps == [0.5, 0.5, 0.5]


def test_a_condition_already_true_does_not_sleep() -> None:
    clock = ManualClock()
    assert wait_until(lambda: "ready", 0, clock=clock) == "ready"
    assert clock.sleeps == []


def test_looks_every_interval_and_once_more_at_the_deadline() -> None:
    clock = ManualClock()
    predicate, calls = _counting([False])
    with pytest.raises(WaitTimeout):
        wait_until(predicate, 1.0, 0.3, clock=clock)
    # 0.3 + 0.3 + 0.3 then the 0.1 left: the last look falls on the deadline, not after it.
    assert clock.sleeps == pytest.approx([0.3, 0.3, 0.3, 0.1])
    assert len(calls) == 5
    assert clock.now == pytest.approx(1.0)


def test_a_condition_met_at_the_deadline_is_not_a_timeout() -> None:
    clock = ManualClock()
    predicate, _ = _counting([False, False, "late"])
    assert wait_until(predicate, 2.0, 1.0, clock=clock) == "late"
    assert clock.now == pytest.approx(2.0)


def test_timeout_names_what_was_awaited_and_the_last_value() -> None:
    clock = ManualClock()
    rows = [3]
    with pytest.raises(WaitTimeout) as caught:
        wait_until(
            lambda: rows[0] >= 8 and rows[0],
            5,
            1,
            clock=clock,
            describe=lambda: f"8 rows in the sink (has {rows[0]})",
        )
    err = caught.value
    assert isinstance(err, TimeoutError)
    expected = "timed out after 5s waiting for 8 rows in the sink (has 3) (last value: False)"
    assert str(err) == expected
    assert err.last is False and err.error is None and err.timeout_s == 5


def test_default_description_is_the_predicates_name() -> None:
    def slot_released() -> bool:
        return False

    with pytest.raises(WaitTimeout, match=r"waiting for .*slot_released"):
        wait_until(slot_released, 0, clock=ManualClock())


def test_a_long_last_value_is_clipped_in_the_message() -> None:
    with pytest.raises(WaitTimeout) as caught:
        wait_until(lambda: "", 0, clock=ManualClock(), describe="x")
    assert "last value: ''" in str(caught.value)

    class Empty:
        def __bool__(self) -> bool:
            return False

        def __repr__(self) -> str:
            return "row" * 1000

    with pytest.raises(WaitTimeout) as caught:
        wait_until(Empty, 0, clock=ManualClock(), describe="x")
    assert str(caught.value).endswith("(last value: " + ("row" * 1000)[:200] + "...)")
    assert len(str(caught.value)) < 300


def test_an_ignored_error_means_not_yet() -> None:
    clock = ManualClock()
    attempts = []

    def connect() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionRefusedError("server starting")
        return "connected"

    assert wait_until(connect, 5, 1, clock=clock, ignore=(ConnectionError,)) == "connected"
    assert clock.sleeps == [1, 1]


def test_an_ignored_error_at_the_deadline_is_named_and_chained() -> None:
    def connect() -> str:
        raise ConnectionRefusedError("server starting")

    with pytest.raises(WaitTimeout) as caught:
        wait_until(connect, 2, 1, clock=ManualClock(), ignore=(ConnectionError,), describe="pg")
    err = caught.value
    assert "last error: ConnectionRefusedError('server starting')" in str(err)
    assert isinstance(err.error, ConnectionRefusedError) and err.__cause__ is err.error
    assert err.last is None


def test_any_other_error_is_raised_at_once_unchanged() -> None:
    clock = ManualClock()

    def broken() -> bool:
        raise KeyError("bug")

    with pytest.raises(KeyError, match="bug"):
        wait_until(broken, 10, clock=clock, ignore=(ConnectionError,))
    assert clock.sleeps == []


def test_runs_on_the_real_clock_by_default() -> None:
    with pytest.raises(WaitTimeout, match=r"after 0\.02s"):
        wait_until(lambda: False, 0.02, 0.01)
