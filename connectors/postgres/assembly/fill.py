"""Unchanged TOAST values: filled from the batch, the log's previous image, or a read.

The server does not resend an unchanged TOASTed value (``UNCHANGED`` in the tuple): the
previous image has it. That image is the key's latest event in the batch being built, else the
latest record the log holds for the key
(:class:`~connectors.postgres.assembly.toast.ToastFiller`), else the row as the database has
it now, read by key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from cdc.contracts.events import Row
from cdc.envelope.encode import EncodedRow, encode_key
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.batch import Batch
from connectors.postgres.assembly.relation_state import RelationState
from connectors.postgres.assembly.toast import ToastFiller, fill_from, missing_columns


class RowReader(Protocol):
    """The catalog lookup a fill falls back to (``CatalogReader.read_row``)."""

    def read_row(
        self, schema: str, table: str, columns: list[str], key: dict[str, str | None]
    ) -> tuple[str | None, ...] | None:
        """The current text of ``columns`` of the row with ``key``, or ``None``."""
        ...


class ToastFill:
    """Fills a row's unchanged TOAST values.

    Args:
        reader: the fallback read.
        toast: previous images from the log, and the fallback counters.
        batch: the batch being built (the most recent images).
        locate: a key -> the topic and record key the log holds its latest record under
            (the record key in its ``{"schema", "payload"}`` wrapper under ``schemas.enable``,
            the topic and key a transform routes it to); ``None``: the relation's topic and
            the key's JSON.
    """

    __slots__ = ("_batch", "_locate", "_reader", "_records", "_toast")

    def __init__(
        self,
        reader: RowReader,
        toast: ToastFiller,
        batch: Batch,
        locate: Callable[[RelationState, Row], tuple[str, bytes] | None] | None = None,
        records: bool = False,
    ) -> None:
        self._reader, self._toast, self._batch = reader, toast, batch
        self._locate = locate
        self._records = records  # the batch holds records, not events (Batch.latest_record)

    def fill(
        self,
        rel: RelationState,
        row: Row,
        image: Row | None,
        lookup_key: Row,
        raw: pg.TupleData,
    ) -> dict[str, Any] | None:
        """Fill unchanged TOAST values of ``row``; the extra ``source`` fields to record.

        ``lookup_key`` is the key the previous image is stored under (the old key when the
        update changes it); ``raw`` is the new tuple, whose key the row has now.
        """
        wanted = missing_columns(row)
        missing = fill_from(row, image, wanted)
        if missing:
            found, recent = (False, None) if self._records else self._recent(rel, lookup_key)
            if not found:
                located = (
                    (rel.topic, encode_key(lookup_key))
                    if self._locate is None
                    else self._locate(rel, lookup_key)
                )
                if located is not None and self._records:
                    found, recent = self._batch.latest_record(*located)
                if located is not None and not found:
                    recent = self._toast.previous(*located)
            missing = fill_from(row, recent, missing)
        extra = None if not missing else self._read(rel, row, missing, raw)
        self._batch.size += filled_bytes(row, wanted)
        return extra

    def _recent(self, rel: RelationState, key: Row) -> tuple[bool, Mapping[str, Any] | None]:
        """The key's latest image in the batch being built, if the batch changed it."""
        latest = self._batch.latest(rel.schema, rel.table, key)
        if latest is None:
            return False, None
        after = latest.after
        return True, after.values_dict() if isinstance(after, EncodedRow) else after

    def _read(
        self, rel: RelationState, row: Row, missing: list[str], raw: pg.TupleData
    ) -> dict[str, Any]:
        """Fill ``missing`` from the row as the database has it now (``None`` if it is gone)."""
        text = self._reader.read_row(rel.schema, rel.table, missing, rel.key_text(raw))
        self._toast.fell_back(rel.info.name, missing, gone=text is None)
        if text is None:
            for name in missing:
                row[name] = None
            return {"toast_unavailable": missing}
        values: list[Any] = [None] * len(rel.relation.columns)
        for name, value in zip(missing, text, strict=True):
            values[rel.index[name]] = value
        read = rel.convert(tuple(values))
        for name in missing:
            row[name] = read[name]
        return {"toast_fallback": True, "toast_fallback_columns": missing}


def filled_bytes(row: Row, names: list[str]) -> int:
    """About the bytes of the values filled into ``row``'s ``names``: their text's length
    (a value larger than a WAL message's, which the batch's byte bound must see)."""
    size = 0
    for name in names:
        value = row.get(name)
        if isinstance(value, str | bytes):
            size += len(value)
        elif value is not None:
            size += 8
    return size
