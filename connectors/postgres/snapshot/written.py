"""A streamed change the source wrote as its record, as the re-snapshot windows see it.

When the stream writes its changes as records (:attr:`SourceContext.write_records`), a batch
has no events: while windows are open or signals may be in it, the windows' code reads each
record through this view (its table, whether it is a truncate, its key as the windows key rows,
a signal row's content). Built only for such batches, never for the stream's usual ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from cdc.envelope.encode import encode_key, payload
from cdc.log.base import Record


@dataclass(slots=True)
class WrittenChange:
    """One record of the batch and its operation (``""``: a delete's tombstone).

    Attributes:
        table_id: ``schema.table`` of the change (no transform routes a written record).
    """

    record: Record
    op: str
    table_id: str

    @property
    def tombstone(self) -> bool:
        return self.record.value is None

    @property
    def truncate(self) -> bool:
        return self.op == "t"

    def window_key(self, wrapped: bool) -> bytes:
        """The key as a window's rows are keyed: ``encode_key``'s JSON, without the
        ``schemas.enable`` wrapper (``wrapped``) the record key may have."""
        key = self.record.key or b"null"
        return encode_key(payload(orjson.loads(key))) if wrapped else key

    def signal_row(self, table_id: str) -> tuple[dict[str, Any] | None, int] | None:
        """For a change of ``table_id`` (the signal table): its inserted row (``None`` for
        another operation) and its transaction's position; ``None`` for another table's."""
        if self.table_id != table_id:
            return None
        position = int(orjson.loads(self.record.pos or b"[0]")[0])
        if self.op != "c" or self.record.value is None:
            return None, position
        after = payload(orjson.loads(self.record.value)).get("after")
        return (after if isinstance(after, dict) else None), position


def written_changes(
    records: Sequence[Record], ops: Sequence[str], prefix: str
) -> list[WrittenChange]:
    """The views of a batch's ``records`` (``prefix``: the pipeline's name and a dot, which
    starts every topic of theirs)."""
    start = len(prefix)
    return [
        WrittenChange(record, op, record.topic[start:])
        for record, op in zip(records, ops, strict=True)
    ]
