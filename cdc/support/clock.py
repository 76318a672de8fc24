"""Time: the wall clock the records and stored states carry, and the injectable monotonic clock
waiting loops run on."""

from __future__ import annotations

import time
from typing import Protocol


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch: the records' timestamps (Kafka's CreateTime) and
    the ``*_ms`` fields of stored states."""
    return time.time_ns() // 1_000_000


class Clock(Protocol):
    """Elapsed time and sleeping, injectable: a waiting loop takes one, so a test can run it on
    a manual clock instead of real seconds (:class:`cdc.testing.ManualClock`)."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class _SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK: Clock = _SystemClock()
"""The process's monotonic clock and real sleeps."""
