"""Wall-clock time as the records and stored states carry it."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch: the records' timestamps (Kafka's CreateTime) and
    the ``*_ms`` fields of stored states."""
    return time.time_ns() // 1_000_000
