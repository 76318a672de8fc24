"""The one retry loop (``cdc.support.retry.retry``): what it retries, how often, what it raises."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from cdc.support.retry import Backoff, Stopped, retry


class Flaky(Exception):
    pass


def failing(times: int, error: type[Exception] = Flaky) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def operation() -> str:
        calls.append(len(calls))
        if len(calls) <= times:
            raise error(f"failure {len(calls)}")
        return "done"

    return calls, operation


def flaky(exc: Exception) -> bool:
    return isinstance(exc, Flaky)


def test_retries_a_retriable_error_until_it_succeeds_and_reports_each_retry() -> None:
    calls, operation = failing(2)
    seen: list[tuple[str, int, float]] = []
    result = retry(
        operation,
        flaky,
        Backoff.fixed(0.001),
        on_retry=lambda exc, failures, delay: seen.append((str(exc), failures, delay)),
    )
    assert result == "done" and len(calls) == 3
    assert seen == [("failure 1", 1, 0.001), ("failure 2", 2, 0.001)]


def test_raises_the_last_error_after_attempts_tries() -> None:
    calls, operation = failing(10)
    with pytest.raises(Flaky, match="failure 3"):
        retry(operation, flaky, Backoff.fixed(0.001), attempts=3)
    assert len(calls) == 3


def test_raises_an_error_that_is_not_retriable_at_once() -> None:
    calls, operation = failing(10, ValueError)
    with pytest.raises(ValueError, match="failure 1"):
        retry(operation, flaky, Backoff.fixed(0.001), attempts=5)
    assert len(calls) == 1


def test_stops_retrying_once_within_s_has_passed() -> None:
    calls, operation = failing(10**6)
    started = time.monotonic()
    with pytest.raises(Flaky):
        retry(operation, flaky, Backoff.fixed(0.01), within_s=0.05)
    assert time.monotonic() - started < 1.0
    assert 2 <= len(calls) < 10**6


def test_a_stop_ends_the_wait() -> None:
    stop = threading.Event()
    stop.set()
    calls, operation = failing(10)
    with pytest.raises(Stopped):
        retry(operation, flaky, Backoff.fixed(30.0), stop=stop)
    assert len(calls) == 1


def test_backoff_doubles_without_jitter_and_fixed_stays() -> None:
    doubling = Backoff(initial_s=0.5, maximum_s=float("inf"), jitter=0.0)
    assert [doubling.next_delay() for _ in range(4)] == [0.5, 1.0, 2.0, 4.0]
    fixed = Backoff.fixed(0.05)
    assert [fixed.next_delay() for _ in range(3)] == [0.05, 0.05, 0.05]
    jittered = Backoff(initial_s=1.0, maximum_s=1.0)
    assert all(0.8 <= jittered.next_delay() <= 1.2 for _ in range(50))


def test_backoff_stays_at_its_maximum_through_a_long_outage() -> None:
    """Thousands of failures in a row (hours of outage) keep the maximum delay, never overflow."""
    backoff = Backoff(initial_s=0.2, maximum_s=10.0, jitter=0.0)
    delays = [backoff.next_delay() for _ in range(5000)]
    assert delays[:3] == [0.2, 0.4, 0.8]
    assert delays[-1] == 10.0 and max(delays) == 10.0
