"""The batch being built: its events (or the records the source wrote for its changes), the
schemas ahead of them, its dead letters."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import orjson

from cdc.contracts.events import ChangeEvent, Op, Row
from cdc.contracts.schema import TableSchema
from cdc.contracts.source import DeadLetter, SourceBatch
from cdc.envelope.encode import payload
from cdc.log.base import Record
from connectors.postgres.assembly.toast import key_identity
from connectors.postgres.lsn import Lsn


class Batch:
    """Events (or records), schemas and dead letters until the source takes them.

    A source that writes its changes' records itself (:attr:`SourceContext.write_records`) fills
    :attr:`records`, the operation of each in :attr:`ops` and its transactions' commit time in
    :attr:`ts_ms`, and leaves :attr:`events` empty; otherwise the reverse.
    """

    __slots__ = (
        "_index",
        "_indexed",
        "_next_schemas",
        "cut",
        "dead",
        "events",
        "ops",
        "records",
        "schemas",
        "size",
        "ts_ms",
    )

    def __init__(self) -> None:
        self.events: list[ChangeEvent] = []
        self.records: list[Record] = []
        self.ops: list[str] = []
        self.ts_ms: int | None = None
        self.schemas: list[TableSchema] = []
        self.dead: list[DeadLetter] = []
        self._next_schemas: list[TableSchema] = []
        #: The batch must end before the next event (a shape change).
        self.cut = False
        #: About the bytes of the batch's changes: their WAL messages (added by the source's
        #: read loop) and the TOASTed values filled in (which no message carries).
        self.size = 0
        # The batch's latest event (or record) per key, built only when a TOAST fill asks (see
        # latest, latest_record).
        self._index: dict[Hashable, Any] = {}
        self._indexed = 0

    def publish(self, schema: TableSchema) -> None:
        """Put ``schema`` ahead of the events of its shape."""
        if self.events or self.records:
            # Events of the old shape go out in their own batch, ahead of the new schema.
            self._next_schemas.append(schema)
            self.cut = True
        else:
            self.schemas.append(schema)

    def has_output(self, commit_lsn: Lsn | None) -> bool:
        """Something to return: events, schemas, letters, or a commit (``commit_lsn``)."""
        return bool(self.events or self.records or self.schemas or self.dead or commit_lsn)

    def take(self, offsets: dict[str, Any] | None) -> SourceBatch:
        """The batch so far, with ``offsets`` to store; the next one starts empty."""
        batch = SourceBatch(
            events=self.events,
            commit_offsets=offsets,
            schemas=self.schemas,
            dead_letters=tuple(self.dead),
            records=self.records,
            record_ops=self.ops if self.records else None,
            ts_ms=self.ts_ms,
        )
        self.events, self.schemas, self.dead = [], self._next_schemas, []
        self.records, self.ops, self.ts_ms = [], [], None
        self._next_schemas = []
        self._index.clear()
        self._indexed = 0
        self.cut = False
        self.size = 0
        return batch

    def latest(self, schema: str, table: str, key: dict[str, Any]) -> ChangeEvent | None:
        """The key's latest event in the batch, if the batch changed it.

        The events are indexed by key on the first call, and only the new ones on each later
        call: a bulk update of a TOASTed table asks once per row, and a scan per call would cost
        the square of the batch size.
        """
        events, index = self.events, self._index
        for event in events[self._indexed :]:
            if event.op is not Op.TRUNCATE:
                source = event.source
                index[key_identity(source.schema, source.table, event.key)] = event
        self._indexed = len(events)
        return index.get(key_identity(schema, table, key))

    def add(self, records: list[Record], op: str, ts_ms: int) -> None:
        """A change's ``records`` (a delete's tombstone after it): of operation ``op``,
        committed at ``ts_ms``."""
        self.records += records
        self.ops.append(op)
        if len(records) > 1:
            self.ops.append("")  # the tombstone
        self.ts_ms = ts_ms

    def latest_record(self, topic: str, key: bytes) -> tuple[bool, Row | None]:
        """``(found, after)``: whether the batch wrote a record of ``key`` (as the topic's
        records key it) and that record's ``after`` image (``None`` for a delete or its
        tombstone). Indexed as :meth:`latest` does."""
        records, index = self.records, self._index
        for record in records[self._indexed :]:
            if record.key is not None:  # a truncate's record has none
                index[(record.topic, record.key)] = record
        self._indexed = len(records)
        found = index.get((topic, key))
        if found is None:
            return False, None
        if found.value is None:
            return True, None
        after = payload(orjson.loads(found.value)).get("after")
        return True, after if isinstance(after, dict) else None
