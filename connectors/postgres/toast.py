"""Fill unchanged TOASTed values (``'u'`` in a tuple) so no placeholder ever reaches a sink.

PostgreSQL does not resend a TOASTed value an UPDATE left alone. The previous image of the same
key has it, in this order of preference:

1. the old tuple, when the table has ``REPLICA IDENTITY FULL``;
2. an image emitted earlier in the range not yet committed to the log (a transaction that
   changes a row twice), kept in a small cache of recent images;
3. the log's latest committed value of the key (the compacted topic holds it);
4. a read of the row from the table. That reflects a later state than the change, so the event
   records which columns were read (``toast_fallback`` in its ``source`` block). When the row is
   gone too (deleted since), the columns are null and ``toast_unavailable`` names them: a later
   delete of that key supersedes the event anyway, and the decision is logged.

Step 3 is wrong for a key changed earlier in the uncommitted range whose image left the cache;
a Bloom filter of the keys touched in that range sends those to step 4 instead, in constant
memory however large the transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import orjson

from cdc.log.base import Log
from cdc.logging import Logger
from connectors.postgres.pgoutput import UNCHANGED

#: A row read back from the table: text values of the requested columns, or ``None``.
RowReader = Callable[[Sequence[str]], tuple[str | None, ...] | None]

_BLOOM_BITS = 1 << 23  # 1 MiB: ~2% false positives after 1,000,000 keys, each a harmless read


class ToastFiller:
    """Previous images of keys, for filling unchanged TOASTed values.

    Args:
        log: the pipeline's log (``latest_value``).
        logger: for the fallback reads.
        cache_size: most recent images kept from the uncommitted range.
    """

    def __init__(self, log: Log, logger: Logger, cache_size: int = 4096) -> None:
        self._log = log
        self._logger = logger
        self._cache: dict[Hashable, dict[str, Any]] = {}
        self._cache_size = cache_size
        self._bloom = bytearray(_BLOOM_BITS // 8)
        self._bloom_dirty = False
        self._log_lookups = True

    def remember(self, identity: Hashable, after: dict[str, Any] | None) -> None:
        """Note the image a key has after an event of the uncommitted range.

        Args:
            identity: the table and the key's raw values, hashable and cheap to build.
            after: the key's new image (``None`` after a delete).
        """
        cache = self._cache
        if after is None:
            cache.pop(identity, None)
        else:
            if len(cache) >= self._cache_size:
                cache.clear()  # the Bloom filter still marks the dropped keys as changed
            cache[identity] = after
        h = hash(identity)
        self._bloom[(h >> 3) % len(self._bloom)] |= 1 << (h & 7)
        self._bloom_dirty = True

    def committed(self) -> None:
        """The uncommitted range became durable: the log now answers for it."""
        self._cache.clear()
        if self._bloom_dirty:
            self._bloom = bytearray(len(self._bloom))
            self._bloom_dirty = False

    def previous(self, identity: Hashable, topic: str, key: bytes) -> dict[str, Any] | None:
        """The key's previous image from the cache or the log; ``None`` means read the table."""
        image = self._cache.get(identity)
        if image is not None:
            return image
        h = hash(identity)
        if self._bloom[(h >> 3) % len(self._bloom)] & (1 << (h & 7)):
            return None  # changed earlier in this range: the log's image is stale
        return self._from_log(topic, key)

    def _from_log(self, topic: str, key: bytes) -> dict[str, Any] | None:
        if not self._log_lookups:
            return None
        try:
            value = self._log.latest_value(topic, key)
        except NotImplementedError:
            self._log_lookups = False  # e.g. Kafka: every fill reads the table
            self._logger.info("toast.log_lookup_unavailable")
            return None
        if value is None:
            return None
        after = orjson.loads(value).get("after")
        return after if isinstance(after, dict) else None


def missing_columns(row: dict[str, Any]) -> list[str]:
    """Columns of ``row`` whose value is the unchanged-TOAST sentinel."""
    return [name for name, value in row.items() if value is UNCHANGED]


def fill_from(row: dict[str, Any], image: dict[str, Any] | None, columns: list[str]) -> list[str]:
    """Copy ``columns`` from ``image`` into ``row``; returns the columns still missing."""
    if image is None:
        return columns
    left = []
    for name in columns:
        value = image.get(name, UNCHANGED)
        if value is UNCHANGED:
            left.append(name)
        else:
            row[name] = value
    return left
