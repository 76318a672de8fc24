"""The row encoder's interface, and its pure-Python implementation: the reference.

A relation's row encoder turns its tuples (pgoutput messages, ``COPY ... TO STDOUT`` lines)
into row JSON, key and key JSON, and snapshot lines into whole records. Two implementations
follow this one :class:`RowEncoder` interface, as psycopg's ``pq`` has its Python and C ones:
:class:`PythonRowEncoder` here, and the Rust one in :mod:`connectors.postgres.types.row_encoder`,
which hands back to this one every tuple it declines.
:func:`connectors.postgres.types.row_encoder.row_encoder` picks one at import; no caller knows
which runs. ``tests/unit/test_pg_row_encoder.py`` holds the two to the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from cdc.contracts.events import Row
from cdc.envelope.encode import EncodedRow, RecordTemplate, dumps, encode_key, exact
from connectors.postgres.pgoutput import UNCHANGED, TupleData, tuple_at
from connectors.postgres.types.copytext import split_line

#: A streamed row: its key (the key columns' values by name, in key order), the row (the Rust
#: encoder's decodes its values on demand), the row's JSON and the key's JSON (the record key).
Keyed = tuple[Row, Mapping[str, Any], bytes, bytes]
#: A snapshot row: the row, and its key's JSON.
KeyedRow = tuple[EncodedRow, bytes]
# Where the new tuple starts in an Insert, and in an Update without an old tuple: the tag, the
# relation OID (4 bytes), then 'N'.
NEW_TUPLE_AT = 6


class RowEncoder(Protocol):
    """What the source asks of a relation's row encoder; either implementation answers all of
    it, and both give the same bytes.

    Raises (every method):
        ConversionError: a value a converter rejects.
        ProtocolError: a malformed tuple.
    """

    def encode_tuple(self, message: bytes) -> Keyed | None:
        """The new tuple of an Insert, or of an Update without an old tuple; ``None`` when it
        has an unchanged TOAST value, which only the previous image can fill."""
        ...

    def encode_json(self, message: bytes) -> tuple[bytes, bytes] | None:
        """The row JSON and key JSON of :meth:`encode_tuple`'s tuple, for a record written at
        once (no row nor key kept); ``None`` as there."""
        ...

    def copy_records(
        self,
        lines: list[bytes],
        template: RecordTemplate,
        order: bytes,
        extra: bytes,
        now_ms: int,
        first: int,
    ) -> list[tuple[bytes, bytes]]:
        """The record key and value of each line of ``COPY ... TO STDOUT`` text, the value
        written through ``template`` with ``order`` (``source.sequence``) and ``extra``; the
        lines' sequences count from ``first`` (their records' positions, which the caller
        keeps beside the values: :meth:`RecordTemplate.pos`)."""
        ...

    def copy_rows(self, lines: list[bytes]) -> list[KeyedRow]:
        """The row and key JSON of each line of ``COPY ... TO STDOUT`` text."""
        ...


class PythonRowEncoder:
    """:class:`RowEncoder` through the Python converters and orjson.

    Args:
        convert: tuple -> row dict (:func:`connectors.postgres.types.row_converter`).
        key: the key columns, in key order.
    """

    __slots__ = ("_convert", "_key")

    def __init__(self, convert: Callable[[TupleData], Row], key: Sequence[str]) -> None:
        self._convert = convert
        self._key = tuple(key)

    def encode_tuple(self, message: bytes) -> Keyed | None:
        values = tuple_at(message, NEW_TUPLE_AT)
        if UNCHANGED in values:
            return None
        return self.encode_values(values)

    def encode_json(self, message: bytes) -> tuple[bytes, bytes] | None:
        keyed = self.encode_tuple(message)
        return None if keyed is None else (keyed[2], keyed[3])

    def encode_values(self, values: TupleData) -> Keyed:
        """A tuple's key, row, row JSON and key JSON.

        The row JSON is not copied to its own size (:func:`~cdc.envelope.encode.exact`): it is used
        once, to write the record value, and the event keeps the row itself.
        """
        row = self._convert(values)
        key = {k: row[k] for k in self._key}
        return key, row, dumps(row), encode_key(key)

    def copy_records(
        self,
        lines: list[bytes],
        template: RecordTemplate,
        order: bytes,
        extra: bytes,
        now_ms: int,
        first: int,
    ) -> list[tuple[bytes, bytes]]:
        return [
            self.copy_record(line, template, order, extra, now_ms, sequence)
            for sequence, line in enumerate(lines, first)
        ]

    def copy_record(
        self,
        line: bytes,
        template: RecordTemplate,
        order: bytes,
        extra: bytes,
        now_ms: int,
        sequence: int,
    ) -> tuple[bytes, bytes]:
        """One line's record key and value (see :meth:`copy_records`; ``sequence`` is its
        record's position, beside the value)."""
        _, _, row_json, key_json = self.encode_values(split_line(line))
        return key_json, template.value(row_json, order, extra, now_ms)

    def copy_rows(self, lines: list[bytes]) -> list[KeyedRow]:
        return [self.copy_row(line) for line in lines]

    def copy_row(self, line: bytes) -> KeyedRow:
        """One line's row and key JSON."""
        row = self._convert(split_line(line))
        key_json = encode_key({k: row[k] for k in self._key})
        return EncodedRow.of(exact(dumps(row)), row), key_json  # a window keeps it: exact

    def decode_new(self, message: bytes) -> Row:
        """The row of an Insert, or an Update without an old tuple, from its message bytes."""
        return self._convert(tuple_at(message, NEW_TUPLE_AT))

    def decode_line(self, line: bytes) -> Row:
        """The row of a ``COPY ... TO STDOUT`` line."""
        return self._convert(split_line(line))
