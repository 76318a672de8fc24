"""Fill unchanged TOASTed values (``'u'`` in a tuple) so no placeholder ever reaches a sink.

PostgreSQL does not resend a TOASTed value an UPDATE left alone. The previous image of the same
key has it, in this order of preference:

1. the old tuple, when the table has ``REPLICA IDENTITY FULL``;
2. the latest event of the key in the batch being built (a transaction that changes a row
   twice);
3. the log's latest value of the key (the compacted topic holds it). The source asks on the
   thread that appends its batches, so the log answers with what the open transaction appended
   too: a key changed in an earlier batch of a large transaction, not committed yet, gets that
   image (:meth:`cdc.log.base.Log.latest_value`);
4. a read of the row from the table. That reflects a later state than the change, so the event
   records which columns were read (``toast_fallback`` in its ``source`` block). When the row is
   gone too (deleted since), the columns are null and ``toast_unavailable`` names them: a later
   delete of that key supersedes the event anyway, and the decision is logged.

A log that cannot look keys up (Kafka) skips step 3.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import orjson

from cdc.envelope import encode_key
from cdc.log.base import Log
from cdc.logging import Logger
from connectors.postgres.pgoutput import UNCHANGED


def key_identity(schema: str, table: str, key: dict[str, Any]) -> Hashable:
    """A hashable name for one key of one table."""
    identity = (schema, table, tuple(key.values()))
    try:
        hash(identity)
    except TypeError:  # a JSON or array key column
        return (schema, table, encode_key(key))
    return identity


class ToastFiller:
    """Previous images of keys from the log.

    Args:
        log: the pipeline's log (``latest_value``).
        logger: for the fallback reads.
    """

    def __init__(self, log: Log, logger: Logger) -> None:
        self._log = log
        self._logger = logger
        self._log_lookups = True

    def previous(self, topic: str, key: bytes) -> dict[str, Any] | None:
        """The key's previous image from the log; ``None`` means read the table."""
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
