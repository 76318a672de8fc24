"""When to try a delivery again, and how long to wait first. Pure functions, no I/O.

A response's status decides (:func:`outcome`); the wait is a capped exponential backoff with full
jitter (a random wait below the cap, so workers that failed together spread out; AWS's
"Exponential Backoff and Jitter"), or the receiver's ``Retry-After`` when it sent one.
"""

from __future__ import annotations

import random
import time
from email.utils import parsedate_to_datetime
from enum import Enum

from sinks.http.config import RetryConfig

#: Answers that say the URL or the credentials are wrong, not a record: no record is to blame,
#: so none is dead-lettered; the sink stops with the fix (check ``url`` and ``headers``).
NOT_THE_RECORDS = frozenset({401, 403, 404, 405, 407, 410})


class Outcome(Enum):
    DELIVERED = "delivered"
    RETRY = "retry"  # 5xx, 408, 429: the receiver may take it later
    REFUSED = "refused"  # any other 4xx: a record of the batch is bad (bisected)
    MISCONFIGURED = "misconfigured"  # 3xx, NOT_THE_RECORDS: stop the sink


def outcome(status: int) -> Outcome:
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status >= 500 or status in (408, 429):
        return Outcome.RETRY
    if 400 <= status < 500 and status not in NOT_THE_RECORDS:
        return Outcome.REFUSED
    return Outcome.MISCONFIGURED


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds from ``now`` (Unix seconds): delay-seconds or an HTTP date
    (a date in the past is 0); ``None`` when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; an obsolete form may carry no zone
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class Delays:
    """The waits of one run of failures, reset by a delivery."""

    def __init__(self, config: RetryConfig, rng: random.Random | None = None) -> None:
        self._config = config
        self._rng = rng or random.Random()
        self.failures = 0

    def next(self, retry_after: float | None = None) -> float:
        """The wait before the next attempt; counts a failure."""
        config = self._config
        self.failures += 1
        if retry_after is not None:
            return min(retry_after, config.max_retry_after_s)
        doublings = min(self.failures - 1, 32)  # the first wait's cap is initial_backoff_s
        cap = min(config.max_backoff_s, config.initial_backoff_s * 2.0**doublings)
        return self._rng.uniform(0.0, cap)

    def reset(self) -> None:
        self.failures = 0
