"""How many records a sink task asks the log for at a time: bounded by count and by bytes.

Each read asks the log's consumer for a count and a byte bound
(:meth:`cdc.log.base.Consumer.poll`'s ``max_records`` and ``max_bytes``): the consumer stops at
either, so a read after the values grew (small ones, then large ones) holds about ``max_bytes``,
not the count the small ones allowed. The count is sized here too: the next read asks for as many
records as fit ``max_bytes`` at the size of the records read last, at most ``max_records`` and at
least one (a single record larger than the bound still flows), so a consumer that fetches by
count (Kafka's client) fetches about what the read keeps. The first read of a task is small, as
it knows no size yet: a task started on a backlog of 1 MB values reads ``FIRST_READ`` of them,
not ``max_records``.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from cdc.log.base import StoredRecord

#: Records the first read of a task asks for, before it knows their size. Small: the next read
#: asks for whatever fits, so a small first read costs one flush more a start, where 64 values of
#: 1 MB held ~3x64 MB at once (stored, decoded, written) in a JSON-lines sink.
FIRST_READ = 8

_VALUE = attrgetter("value")


class ReadSize:
    """The count of the next read (:attr:`count`), told the size of each read (:meth:`read`).

    Args:
        max_records: the most records a read asks for (the sink's ``batch_records``).
        max_bytes: about the most bytes of values a read holds (the sink's ``batch_bytes``).
    """

    __slots__ = ("count", "max_bytes", "max_records")

    def __init__(self, max_records: int, max_bytes: int) -> None:
        self.max_records, self.max_bytes = max_records, max_bytes
        self.count = min(max_records, FIRST_READ)

    def read(self, stored: Sequence[StoredRecord]) -> None:
        """Size the next read after ``stored`` (the records this one returned)."""
        # map/filter/sum run in C: no Python call a record on the sink's hot path.
        size = sum(map(len, filter(None, map(_VALUE, stored))))
        if not size:
            # Nothing learnt (no record, or tombstones only): the values may still be large. A
            # 1 MB table's delete is followed by its tombstone, and a read of that one tombstone
            # must not make the next read ask for batch_records values.
            return
        self.count = max(1, min(self.max_records, self.max_bytes * len(stored) // size))
