"""Fill unchanged TOASTed values (``'u'`` in a tuple) so no placeholder ever reaches a sink.

PostgreSQL does not resend a TOASTed value an UPDATE left alone. The previous image of the same
key has it, in this order of preference:

1. the old tuple, when the table has ``REPLICA IDENTITY FULL``;
2. the latest event of the key in the batch being built (a transaction that changes a row
   twice);
3. the log's latest value of the key (the compacted topic holds it). The source asks on the
   thread that appends its batches, so the log answers with what the open transaction appended
   too: a key changed in an earlier batch of a large transaction, not committed yet, gets that
   image (:meth:`cdc.log.base.Log.latest_value`). The embedded log looks the key up in itself;
   the Kafka log in a local store of each key's latest TOAST-able values, which the source
   declares at open and at each Relation message (:meth:`ToastFiller.declare`,
   :mod:`cdc.log.kafka.image_sync`);
4. the last resort, when the log truly lacks the key (a row never snapshotted, under
   ``snapshot: never``): a read of the row from the table. That reflects a later state than the
   change, so the event records which columns were read (``toast_fallback`` in its ``source``
   block), and each read is logged as a warning with a running count. When the row is gone too
   (deleted since), the columns are null and ``toast_unavailable`` names them: a later delete of
   that key supersedes the event anyway.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import orjson

from cdc.envelope.encode import encode_key, payload
from cdc.log.base import Log
from cdc.support.logging import Logger
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
    """Previous images of keys from the log, and the last-resort reads, counted.

    Args:
        log: the pipeline's log (``keep_latest``, ``latest_value``).
        logger: for the fallback reads.

    Attributes:
        fallback_reads: fills that read the row because the log had no previous image.
        unavailable: fills whose row was gone too (written as null, ``toast_unavailable``).
    """

    def __init__(self, log: Log, logger: Logger) -> None:
        self._log = log
        self._logger = logger
        self._log_lookups = True
        self._fields: dict[str, list[str]] = {}
        self.fallback_reads = 0
        self.unavailable = 0

    def declare(self, fields: Mapping[str, Sequence[str]]) -> None:
        """The TOAST-able columns of every captured table, by topic, before anything is read:
        the log keeps their latest values if it cannot otherwise look keys up (Kafka)."""
        self._fields = {topic: list(columns) for topic, columns in fields.items() if columns}
        self._log.keep_latest(self._fields)

    def track(self, topic: str, columns: Sequence[str]) -> None:
        """A table's TOAST-able columns as of a Relation message (a column added or retyped)."""
        if list(columns) == self._fields.get(topic, []):
            return
        if columns:
            self._fields[topic] = list(columns)
        else:
            self._fields.pop(topic, None)
        self._logger.info("toast.columns_changed", topic=topic, columns=list(columns))
        self._log.keep_latest(self._fields)

    def previous(self, topic: str, key: bytes) -> dict[str, Any] | None:
        """The key's previous image from the log; ``None`` means read the table."""
        if not self._log_lookups:
            return None
        try:
            value = self._log.latest_value(topic, key)
        except NotImplementedError:
            self._log_lookups = False
            self._logger.warning(
                "toast.log_lookup_unavailable",
                reason="the log cannot look keys up: unchanged TOASTed values are read from "
                "the table, which gives their value as of the read, not of the change",
            )
            return None
        if value is None:
            return None
        # payload(): under schemas.enable the stored value is in the {"schema", "payload"} wrapper
        after = payload(orjson.loads(value)).get("after")
        return after if isinstance(after, dict) else None

    def fell_back(self, table: str, columns: list[str], *, gone: bool) -> None:
        """Count and log a last-resort read of ``columns`` (``gone``: the row was deleted)."""
        if gone:
            self.unavailable += 1
            self._logger.warning(
                "toast.row_gone", table=table, columns=columns, count=self.unavailable
            )
            return
        self.fallback_reads += 1
        self._logger.warning(
            "toast.fallback_read",
            table=table,
            columns=columns,
            count=self.fallback_reads,
            reason="the log has no previous image of the key (a row never snapshotted?)",
        )


def missing_columns(row: dict[str, Any]) -> list[str]:
    """Columns of ``row`` whose value is the unchanged-TOAST sentinel."""
    return [name for name, value in row.items() if value is UNCHANGED]


def fill_from(
    row: dict[str, Any], image: Mapping[str, Any] | None, columns: list[str]
) -> list[str]:
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
