"""The batch being built: its events, the schemas ahead of them, its dead letters."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from cdc.contracts.events import ChangeEvent, Op
from cdc.contracts.schema import TableSchema
from cdc.contracts.source import DeadLetter, SourceBatch
from connectors.postgres.assembly.toast import key_identity
from connectors.postgres.lsn import Lsn


class Batch:
    """Events, schemas and dead letters until the source takes them."""

    __slots__ = (
        "_index",
        "_indexed",
        "_next_schemas",
        "cut",
        "dead",
        "events",
        "schemas",
        "size",
    )

    def __init__(self) -> None:
        self.events: list[ChangeEvent] = []
        self.schemas: list[TableSchema] = []
        self.dead: list[DeadLetter] = []
        self._next_schemas: list[TableSchema] = []
        #: The batch must end before the next event (a shape change).
        self.cut = False
        #: About the bytes of the batch's changes: their WAL messages (added by the source's
        #: read loop) and the TOASTed values filled in (which no message carries).
        self.size = 0
        # The batch's latest event per key, built only when a TOAST fill asks (see latest).
        self._index: dict[Hashable, ChangeEvent] = {}
        self._indexed = 0

    def publish(self, schema: TableSchema) -> None:
        """Put ``schema`` ahead of the events of its shape."""
        if self.events:
            # Events of the old shape go out in their own batch, ahead of the new schema.
            self._next_schemas.append(schema)
            self.cut = True
        else:
            self.schemas.append(schema)

    def has_output(self, commit_lsn: Lsn | None) -> bool:
        """Something to return: events, schemas, letters, or a commit (``commit_lsn``)."""
        return bool(self.events or self.schemas or self.dead or commit_lsn)

    def take(self, offsets: dict[str, Any] | None) -> SourceBatch:
        """The batch so far, with ``offsets`` to store; the next one starts empty."""
        batch = SourceBatch(
            events=self.events,
            commit_offsets=offsets,
            schemas=self.schemas,
            dead_letters=tuple(self.dead),
        )
        self.events, self.schemas, self.dead = [], self._next_schemas, []
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
