"""The source's lag, as ``cdc_source_lag_seconds`` and the terminal display show it.

The lag is the commit time of the last appended change to now, read when it is asked for (a
scrape, a refresh), so it grows while the source is stuck; it is 0 once the source has read
nothing for :data:`IDLE_S` (caught up). Shorter gaps are the server decoding the next
transaction of a backlog, not the end of it. The source task feeds it once per batch.
"""

from __future__ import annotations

import time
from typing import Final

from cdc.support.clock import SYSTEM_CLOCK, Clock

IDLE_S: Final = 1.0


class LagClock:
    """The source task's lag; read from any thread (two attribute reads, no lock needed)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock  # times the idle gap; a test moves it by hand
        self._last_ts_ms: int | None = None
        self._idle_since: float | None = None
        self._caught_up = True

    def appended(self, commit_ts_ms: int) -> None:
        """Changes up to one committed at ``commit_ts_ms`` (ms since the epoch) were appended."""
        self._last_ts_ms = commit_ts_ms
        self._idle_since = None
        self._caught_up = False

    def idle(self) -> None:
        """A poll found nothing; after :data:`IDLE_S` of them the source is caught up."""
        now = self._clock.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        elif now - self._idle_since >= IDLE_S:
            self._caught_up = True

    def seconds(self) -> float:
        """The lag now (0.0 when caught up, or before the first change)."""
        last = self._last_ts_ms
        if self._caught_up or last is None:
            return 0.0
        return max(0.0, time.time() - last / 1000)
