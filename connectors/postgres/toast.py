"""Fill unchanged TOASTed values (``'u'`` in a tuple) so no placeholder ever reaches a sink.

PostgreSQL does not resend a TOASTed value an UPDATE left alone. The previous image of the same
key has it, in this order of preference:

1. the old tuple, when the table has ``REPLICA IDENTITY FULL``;
2. the latest event of the key in the batch being built (a transaction that changes a row
   twice);
3. the log's latest committed value of the key (the compacted topic holds it);
4. a read of the row from the table. That reflects a later state than the change, so the event
   records which columns were read (``toast_fallback`` in its ``source`` block). When the row is
   gone too (deleted since), the columns are null and ``toast_unavailable`` names them: a later
   delete of that key supersedes the event anyway, and the decision is logged.

Step 3 is wrong for a key changed in an earlier batch of a transaction still open (its batches
are appended to the log but not committed). The keys of such batches go into a Bloom filter,
in constant memory however large the transaction, and a key it may hold goes to step 4. Small
transactions never pay for it: their batch ends at their commit.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import orjson

from cdc.envelope import encode_key
from cdc.events import ChangeEvent, Op
from cdc.log.base import Log
from cdc.logging import Logger
from connectors.postgres.pgoutput import UNCHANGED

#: A row read back from the table: text values of the requested columns, or ``None``.
RowReader = Callable[[Sequence[str]], tuple[str | None, ...] | None]

_BLOOM_BITS = 1 << 23  # 1 MiB: ~2% false positives after 1,000,000 keys, each a harmless read


def key_identity(schema: str, table: str, key: dict[str, Any]) -> Hashable:
    """A hashable name for one key of one table."""
    identity = (schema, table, tuple(key.values()))
    try:
        hash(identity)
    except TypeError:  # a JSON or array key column
        return (schema, table, encode_key(key))
    return identity


class ToastFiller:
    """Previous images of keys from the log, guarded against keys changed in open batches.

    Args:
        log: the pipeline's log (``latest_value``).
        logger: for the fallback reads.
    """

    def __init__(self, log: Log, logger: Logger) -> None:
        self._log = log
        self._logger = logger
        self._bloom = bytearray(_BLOOM_BITS // 8)
        self._bloom_dirty = False
        self._log_lookups = True

    def mark_events(self, events: Iterable[ChangeEvent]) -> None:
        """Note the keys of ``events`` (truncates have none), a batch handed out before its
        transaction committed.

        The hot path of a large transaction: :func:`key_identity` inlined, the same hash.
        """
        bloom, size = self._bloom, len(self._bloom)
        truncate = Op.TRUNCATE
        for event in events:
            if event.op is truncate:
                continue
            source = event.source
            try:
                h = hash((source.schema, source.table, tuple(event.key.values())))
            except TypeError:  # a JSON or array key column
                h = hash(key_identity(source.schema, source.table, event.key))
            bloom[(h >> 3) % size] |= 1 << (h & 7)
            self._bloom_dirty = True

    def committed(self) -> None:
        """Everything handed out is durable: the log answers for every key again."""
        if self._bloom_dirty:
            self._bloom = bytearray(len(self._bloom))
            self._bloom_dirty = False

    def previous(self, identity: Hashable, topic: str, key: bytes) -> dict[str, Any] | None:
        """The key's previous image from the log; ``None`` means read the table."""
        if self._bloom_dirty:
            h = hash(identity)
            if self._bloom[(h >> 3) % len(self._bloom)] & (1 << (h & 7)):
                return None  # changed in an uncommitted batch: the log's image is stale
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
