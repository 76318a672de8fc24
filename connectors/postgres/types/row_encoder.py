"""The row encoder, chosen once at import: Rust when it is built, else the Python reference.

``connectors.postgres._native`` (Rust, ``connectors/postgres/native``) is built by ``pip install``
when a Rust toolchain is present. It writes the JSON that ``orjson.dumps`` would write for the
row :func:`~connectors.postgres.types.row_converter` returns, without building the Python
values: the common types take native fast paths, the rest call their Python converter.
:class:`RustRowEncoder` wraps it behind the :class:`~connectors.postgres.types.encoder.RowEncoder`
interface and hands every tuple it declines (unchanged TOAST values, binary values, a value a
converter rejects, an escape in a COPY line) to the
:class:`~connectors.postgres.types.encoder.PythonRowEncoder`, so behaviour never depends on whether
it was built; ``tests/unit/test_pg_row_encoder.py`` holds the two to the same bytes.

Under the readable envelope defaults (:data:`~cdc.envelope.options.READABLE`) every type it
wrote before stays native, in Debezium's forms: text, varchar, uuid, enums, ``json`` and
``jsonb`` (a string of the server's text), integers, booleans, ``timestamptz`` (UTC, six
fraction digits), ``timestamp``/``date``/``time`` under ``isostring`` (ISO with ``Z``),
``numeric`` under ``decimal.handling.mode=string`` (``NaN`` as ``"NAN"``), and flat arrays of
text, integers and booleans. The Python converter writes, per column: ``float4``/``float8``,
``bytea`` (every ``binary.handling.mode``), ``interval``, ``timetz``, ``numeric`` under
``precise`` and ``double``, ``date``/``time``/``timestamp`` under ``adaptive``,
``adaptive_time_microseconds`` and ``connect`` (epoch numbers), ``money``, ``hstore``, and
arrays of anything but text, integers and booleans.

A masked column (:mod:`cdc.transforms.masks`) is written by its mask: ``hash``, ``redact``, ``null``
and ``keep_last`` natively (:class:`~connectors.postgres.types.kinds.MaskKind`), a ``plugin`` mask
through its Python call.

Set ``CDC_NATIVE=0`` to turn it off (to compare, or to rule it out). The source logs which one
runs, and why, at start (:func:`log_selected`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import orjson

from cdc.envelope import encode as envelope
from cdc.envelope.encode import EncodedRow, RecordTemplate
from cdc.support.logging import Logger
from cdc.transforms.masks import Mask
from connectors.postgres import types as t
from connectors.postgres.pgoutput import RelationColumn
from connectors.postgres.types.encoder import (
    NEW_TUPLE_AT,
    Keyed,
    KeyedRow,
    PythonRowEncoder,
    RowEncoder,
)
from connectors.postgres.types.kinds import MaskKind

# The native encoder's kind codes (native/src/lib.rs) are TypeKind's values.
PYTHON: Final = t.TypeKind.PYTHON
_ARRAY_ELEMENT_KINDS: Final = frozenset({t.TypeKind.TEXT, t.TypeKind.INT, t.TypeKind.BOOL})
#: The masks the native encoder computes itself, by :attr:`cdc.transforms.masks.Mask.kind`; any
#: other (a plugin) is a Python call.
_NATIVE_MASKS: Final = {
    "hash": MaskKind.HASH,
    "redact": MaskKind.REDACT,
    "null": MaskKind.NULL,
    "keep_last": MaskKind.KEEP_LAST,
}
# A value is at most 1 GB: keeping 2**32 characters keeps all of it, as any larger n does.
_KEEP_ALL: Final = 1 << 32


#: What the native encoder returns for a row: its JSON, its key (the key columns' values by
#: name, in key order) and the key's JSON, each exactly what ``orjson.dumps`` and the converters
#: give; ``None`` where it declines.
Encoded = tuple[bytes, dict[str, Any], bytes]
Pieces = list[tuple[bytes, bytes] | None]
#: A column as the native encoder takes it: name JSON, kind code, array delimiter, converter
#: (``None`` for text passed through), built-in mask (code, ``hash``'s key, ``keep_last``'s n).
ColumnPlan = tuple[
    bytes, int, str | None, Callable[[str], Any] | None, tuple[int, bytes, int] | None
]


def _load() -> tuple[Any, str | None]:
    """The native encoder class, or ``None`` and why not."""
    if os.environ.get("CDC_NATIVE", "1") == "0":
        return None, "CDC_NATIVE=0"
    try:
        from connectors.postgres import _native
    except ImportError as exc:
        return None, f"not built ({exc})"
    return _native.RowEncoder, None


_NATIVE, REASON = _load()
#: The implementation every relation's encoder has: ``rust`` or ``python``.
IMPLEMENTATION: Final = "python" if _NATIVE is None else "rust"


def available() -> bool:
    """Whether the native encoder was built and is enabled."""
    return _NATIVE is not None


def log_selected(logger: Logger) -> None:
    """Say which row encoder runs, and why (at source start)."""
    logger.info(
        "native.selected", component="row_encoder", implementation=IMPLEMENTATION, reason=REASON
    )


def row_encoder(
    columns: Sequence[RelationColumn],
    registry: t.TypeRegistry,
    key_index: Sequence[int],
    convert: Callable[[Any], dict[str, Any]],
    masks: Mapping[str, Mask] | None = None,
) -> RowEncoder:
    """The encoder of a relation's rows, of the implementation chosen at import; ``convert`` is
    the relation's :func:`~connectors.postgres.types.row_converter` (with ``masks``, the
    masked columns' masks by name)."""
    python = PythonRowEncoder(convert, [columns[i].name for i in key_index])
    native = native_encoder(columns, registry, key_index, masks)
    return python if native is None else RustRowEncoder(native, python)


def native_encoder(
    columns: Sequence[RelationColumn],
    registry: t.TypeRegistry,
    key_index: Sequence[int],
    masks: Mapping[str, Mask] | None = None,
) -> Any:
    """The bare native encoder of a relation's rows (``None`` without it), which declines what
    it cannot write: :class:`RustRowEncoder` completes it. A masked column's text goes to its
    mask (:func:`_masked`)."""
    if _NATIVE is None:
        return None
    masked = masks or {}
    plan = [_column(column, registry, masked.get(column.name)) for column in columns]
    key_names = [columns[i].name for i in key_index]
    return _NATIVE(plan, list(key_index), key_names, envelope.dumps)


def _column(column: RelationColumn, registry: t.TypeRegistry, mask: Mask | None) -> ColumnPlan:
    """A column's plan: its mask's (:func:`_masked`), else its type's kind and its converter
    (none for text passed as it is)."""
    name_json = orjson.dumps(column.name)
    if mask is not None:
        return _masked(name_json, mask)
    kind, delimiter = _kind(registry, column.type_oid, column.type_modifier)
    convert = registry.raw_converter(column.type_oid, column.type_modifier)
    passed = t.converter_kind(convert) is t.TypeKind.TEXT
    return name_json, kind, delimiter, None if passed else convert, None


def _masked(name_json: bytes, mask: Mask) -> ColumnPlan:
    """A masked column's plan: a built-in mask the encoder computes itself (the lock released),
    a plugin's a Python call."""
    code = _NATIVE_MASKS.get(mask.kind)
    if code is None:
        return name_json, PYTHON, None, mask, None
    return name_json, t.TypeKind.TEXT, None, None, (code, mask.key, min(mask.n, _KEEP_ALL))


class RustRowEncoder:
    """:class:`~connectors.postgres.types.encoder.RowEncoder` through the native encoder, with the
    Python one for whatever it declines.

    Args:
        native: ``connectors.postgres._native.RowEncoder`` of the relation.
        python: the relation's Python encoder.
    """

    __slots__ = ("_encode_tuple", "_native", "_python")

    def __init__(self, native: Any, python: PythonRowEncoder) -> None:
        self._native = native
        self._python = python
        self._encode_tuple = native.encode_tuple

    def encode_tuple(self, message: bytes) -> Keyed | None:
        try:
            encoded: Encoded | None = self._encode_tuple(message, NEW_TUPLE_AT)
        except Exception:  # a converter rejected a value: the Python encoder reports it
            encoded = None
        if encoded is None:
            return self._python.encode_tuple(message)
        row, key, key_json = encoded
        return key, EncodedRow(row, message, self._python.decode_new), row, key_json

    def encode_json(self, message: bytes) -> tuple[bytes, bytes] | None:
        try:
            encoded: Encoded | None = self._encode_tuple(message, NEW_TUPLE_AT)
        except Exception:  # a converter rejected a value: the Python encoder reports it
            encoded = None
        if encoded is None:
            return self._python.encode_json(message)
        return encoded[0], encoded[2]

    def copy_records(
        self,
        lines: list[bytes],
        template: RecordTemplate,
        order: bytes,
        extra: bytes,
        now_ms: int,
        first: int,
    ) -> list[tuple[bytes, bytes]]:
        prefix, middle, tail = template.pieces(order, extra, now_ms)
        written = _pieces(self._native.copy_records, lines, prefix, middle, tail, first)
        if written is None:
            return self._python.copy_records(lines, template, order, extra, now_ms, first)
        python = self._python.copy_record
        return [
            python(line, template, order, extra, now_ms, sequence) if record is None else record
            for sequence, (line, record) in enumerate(zip(lines, written, strict=True), first)
        ]

    def copy_rows(self, lines: list[bytes]) -> list[KeyedRow]:
        written = _pieces(self._native.copy_rows, lines)
        if written is None:
            return self._python.copy_rows(lines)
        python, decode = self._python.copy_row, self._python.decode_line
        return [
            python(line) if pair is None else (EncodedRow(pair[1], line, decode), pair[0])
            for line, pair in zip(lines, written, strict=True)
        ]


def _pieces(encode: Callable[..., Pieces], *args: Any) -> Pieces | None:
    """A native piece encoder's result; ``None`` for anything unexpected, so the Python
    encoder converts the piece (or says why)."""
    try:
        return encode(*args)
    except Exception:
        return None


def _kind(registry: t.TypeRegistry, oid: int, typmod: int) -> tuple[int, str | None]:
    """The native kind of a column's type and, for a flat-array fast path, its delimiter.

    A domain is its base type (``TypeRegistry.kind``); an array takes the fast path when its
    elements do, else its whole text goes to the Python converter.
    """
    entry = registry.resolved(oid)
    if entry is not None and entry.kind == "array":
        element = registry.get(entry.element_oid)
        kind = registry.kind(entry.element_oid, registry.base_typmod(oid, typmod))
        if kind in _ARRAY_ELEMENT_KINDS:
            return kind, element.delimiter if element is not None else ","
        return PYTHON, None
    return registry.kind(oid, typmod), None
