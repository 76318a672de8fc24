"""The optional native row encoder: a relation's text values straight to their row JSON.

``connectors.postgres._native`` (Rust, ``connectors/postgres/native``) is built by ``pip install``
when a Rust toolchain is present. It writes the JSON that ``orjson.dumps`` would write for the
row :func:`~connectors.postgres.types.row_converter` returns, without building the Python
values: the common types take native fast paths, the rest call their Python converter. Without
it, or for any tuple it declines (unchanged TOAST values, binary values, a value a converter
rejects), the pure-Python path runs, so behaviour never depends on whether it was built;
``tests/unit/test_pg_fast.py`` holds the two paths to the same bytes.

Set ``CDC_NATIVE=0`` to turn it off (to compare, or to rule it out).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final, Protocol

import orjson

from cdc import envelope
from connectors.postgres import types as t
from connectors.postgres.pgoutput import RelationColumn

# The native encoder's kind codes (native/src/lib.rs) are TypeKind's values.
PYTHON: Final = t.TypeKind.PYTHON
_ARRAY_ELEMENT_KINDS: Final = frozenset({t.TypeKind.TEXT, t.TypeKind.INT, t.TypeKind.BOOL})


#: What the encoder returns for a row: its JSON, its key (the key columns' values by name, in
#: key order) and the key's JSON, each exactly what ``orjson.dumps`` and the converters give.
Encoded = tuple[bytes, dict[str, Any], bytes]


class RowEncoder(Protocol):
    """``connectors.postgres._native.RowEncoder``."""

    def encode_tuple(self, data: bytes, pos: int) -> Encoded | None:
        """The TupleData at ``data[pos:]``; ``None``: use the Python path."""
        ...

    def encode_values(self, values: Sequence[str | None]) -> Encoded | None:
        """Text values; ``None``: use the Python path."""
        ...

    def copy_records(
        self, lines: list[bytes], prefix: bytes, middle: bytes, tail: bytes, first_sequence: int
    ) -> list[tuple[bytes, bytes] | None]:
        """Each line's record key and value (see :func:`cdc.envelope.record_parts`), written
        with the interpreter lock released; ``None`` for a line the Python path must handle."""
        ...

    def copy_rows(self, lines: list[bytes]) -> list[tuple[bytes, bytes] | None]:
        """Each line's key JSON and row JSON, as :meth:`copy_records` writes them."""
        ...


def _load() -> Any:
    if os.environ.get("CDC_NATIVE", "1") == "0":
        return None
    try:
        from connectors.postgres import _native  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _native.RowEncoder


_NATIVE: Final = _load()


def available() -> bool:
    """Whether the native encoder was built and is enabled."""
    return _NATIVE is not None


def row_encoder(
    columns: Sequence[RelationColumn],
    registry: t.TypeRegistry,
    key_index: Sequence[int],
) -> RowEncoder | None:
    """The native encoder of a relation's rows, or ``None`` without the native module."""
    if _NATIVE is None:
        return None
    plan = []
    for column in columns:
        kind, delimiter = _kind(registry, column.type_oid)
        convert = registry.raw_converter(column.type_oid)
        plan.append(
            (
                orjson.dumps(column.name),
                kind,
                delimiter,
                None if t.converter_kind(convert) is t.TypeKind.TEXT else convert,
            )
        )
    key_names = [columns[i].name for i in key_index]
    encoder: RowEncoder = _NATIVE(plan, list(key_index), key_names, envelope.dumps)
    return encoder


def _kind(registry: t.TypeRegistry, oid: int) -> tuple[int, str | None]:
    """The native kind of a type and, for a flat-array fast path, its delimiter.

    A domain is its base type (``TypeRegistry.kind``); an array takes the fast path when its
    elements do, else its whole text goes to the Python converter.
    """
    entry = registry.resolved(oid)
    if entry is not None and entry.kind == "array":
        element = registry.get(entry.element_oid)
        kind = registry.kind(entry.element_oid)
        if kind in _ARRAY_ELEMENT_KINDS:
            return kind, element.delimiter if element is not None else ","
        return PYTHON, None
    return registry.kind(oid), None
