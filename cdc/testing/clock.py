"""A clock a test moves by hand, for code that waits on an injected
:class:`~cdc.support.clock.Clock`."""

from __future__ import annotations


class ManualClock:
    """Monotonic time that passes only when the code under test sleeps (or the test calls
    :meth:`advance`); each sleep is recorded, so a test can check how often a loop looked."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds
