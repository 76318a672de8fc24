"""The row converter: one relation's tuple to its row dict, the hot path of every change."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from connectors.postgres.types.errors import CONVERSION_FAILURES, ConversionError
from connectors.postgres.types.names import type_name
from connectors.postgres.types.scalars import Converter, identity

if TYPE_CHECKING:
    from connectors.postgres.pgoutput import RelationColumn, TupleData
    from connectors.postgres.types.registry import TypeRegistry

__all__ = ["row_converter"]


def row_converter(
    columns: Sequence[RelationColumn],
    registry: TypeRegistry,
    masks: Mapping[str, Callable[[str], Any]] | None = None,
) -> Callable[[TupleData], dict[str, Any]]:
    """A function turning one tuple of a relation into a row dict, column name -> value.

    Converters are looked up once here, not per row. ``None`` stays ``None``, the
    ``UNCHANGED`` sentinel passes through for the source to fill from the previous image, and
    binary values (``bytes``) pass through (the envelope writes them as base64). A masked
    column's text goes to its mask (:class:`cdc.transforms.masks.Mask`) instead of its converter.

    Raises (from the returned function):
        ConversionError: a value does not parse, or the tuple has the wrong column count.
    """
    names = tuple(column.name for column in columns)
    masked = masks or {}
    raws = tuple(
        masked.get(c.name) or registry.raw_converter(c.type_oid, c.type_modifier) for c in columns
    )
    # None marks text passed through as is: skipping the call is the common case's speed-up.
    plan = tuple(
        (name, None if raw is identity else raw) for name, raw in zip(names, raws, strict=True)
    )
    count = len(plan)

    def convert(values: TupleData) -> dict[str, Any]:
        if len(values) != count:
            raise ConversionError("row", repr(values), f"expected {count} columns")
        try:
            return {
                name: value if conv is None or value.__class__ is not str else conv(value)
                for (name, conv), value in zip(plan, values, strict=False)
            }
        except CONVERSION_FAILURES:
            raise _locate_failure(columns, plan, values, registry) from None

    return convert


def _locate_failure(
    columns: Sequence[RelationColumn],
    plan: tuple[tuple[str, Converter | None], ...],
    values: TupleData,
    registry: TypeRegistry,
) -> ConversionError:
    """Redo a failed row column by column to name the culprit (the slow path, once)."""
    for column, (name, conv), value in zip(columns, plan, values, strict=False):
        if conv is None or not isinstance(value, str):
            continue
        try:
            conv(value)
        except CONVERSION_FAILURES as exc:
            type_text = type_name(column.type_oid, column.type_modifier, registry)
            return ConversionError(type_text, value, str(exc), column=name)
    return ConversionError("row", repr(values), "conversion failed")
