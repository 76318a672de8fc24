"""A value that does not convert: fail with the table and position named, or keep the change
as a dead letter (``on_bad_record``)."""

from __future__ import annotations

from cdc.contracts.events import Row
from cdc.contracts.source import DeadLetter
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.batch import Batch
from connectors.postgres.assembly.relation_state import RelationState
from connectors.postgres.assembly.transaction import Transaction
from connectors.postgres.types import ConversionError


class BadRecords:
    """Converts tuples, and deals with those that do not convert.

    Args:
        on_bad_record: ``fail`` or ``dead_letter``.
        batch: where dead letters go.
        tx: the transaction (named in the failure and the letter).
    """

    __slots__ = ("_batch", "_fail", "_tx")

    def __init__(self, on_bad_record: str, batch: Batch, tx: Transaction) -> None:
        self._fail = on_bad_record != "dead_letter"
        self._batch, self._tx = batch, tx

    def convert(self, rel: RelationState, values: pg.TupleData, op: str, lsn: int) -> Row | None:
        """The tuple's row; ``None`` when it does not convert and became a dead letter."""
        try:
            return rel.convert(values)
        except ConversionError as exc:
            self.bad(rel, values, op, lsn, exc)
            return None

    def bad(
        self, rel: RelationState, values: pg.TupleData, op: str, lsn: int, exc: ConversionError
    ) -> None:
        """Fail with the table and position named, or keep the change as a dead letter.

        Raises:
            ConversionError: under ``on_bad_record: fail``.
        """
        if self._fail:
            where = f"table {rel.info.name}, LSN {self._tx.where(lsn)}"
            raise ConversionError(
                exc.type_name, exc.value, f"{exc.reason} ({where})", exc.column
            ) from exc
        self._batch.dead.append(self._letter(rel, values, op, lsn, str(exc)))

    def _letter(
        self, rel: RelationState, values: pg.TupleData, op: str, lsn: int, reason: str
    ) -> DeadLetter:
        names = [c.name for c in rel.relation.columns]
        raw = {
            n: (None if v is None or v is pg.UNCHANGED else v if isinstance(v, str) else v.hex())
            for n, v in zip(names, values, strict=False)
        }
        for name, mask in rel.masks.items():  # a dead letter shows no more than a record would
            text = raw.get(name)
            if text is not None:
                raw[name] = mask(text)
        return DeadLetter(
            table=rel.info.name,
            key={k: raw.get(k) for k in rel.key},
            reason=reason,
            payload={"op": op, "lsn": self._tx.where(lsn), "xid": self._tx.xid, "values": raw},
        )
