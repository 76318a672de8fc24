"""The type registry: type OID -> catalog entry, converter and value kind."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from cdc.envelope.options import READABLE, EnvelopeOptions
from connectors.postgres.types.arrays import array_parser
from connectors.postgres.types.errors import CONVERSION_FAILURES, ConversionError
from connectors.postgres.types.kinds import TypeKind
from connectors.postgres.types.modes import converter_kind, mode_converter
from connectors.postgres.types.names import type_name
from connectors.postgres.types.oids import BUILTINS, TypeEntry, entry_from_row
from connectors.postgres.types.scalars import Converter, identity

__all__ = ["TypeRegistry"]

_MAX_DEPTH: Final = 16  # arrays of arrays, domains of domains: a corrupt catalog must not loop


class TypeRegistry:
    """Type OID -> :class:`TypeEntry` and cached converters; built-in types are preloaded.

    The source adds user types (enums, domains, their arrays) from :data:`TYPE_QUERY` rows
    when a ``Relation`` mentions an OID that :meth:`missing` reports. A column's converter
    depends on its type, its typmod (``numeric(12,2)``, ``time(3)``) and ``options``, the
    pipeline's envelope options (:mod:`.modes`); it is built once per ``(oid, typmod)``.
    """

    def __init__(self, options: EnvelopeOptions = READABLE) -> None:
        self.options: EnvelopeOptions = options
        self._types: dict[int, TypeEntry] = dict(BUILTINS)
        self._raw: dict[tuple[int, int], Converter] = {}
        self._guarded: dict[tuple[int, int], Converter] = {}

    def __contains__(self, oid: object) -> bool:
        return oid in self._types

    def get(self, oid: int) -> TypeEntry | None:
        """The entry of ``oid``, if known."""
        return self._types.get(oid)

    def add(self, entry: TypeEntry) -> None:
        """Add or replace a type; built-in types cannot be replaced."""
        if entry.oid in BUILTINS:
            return
        self._types[entry.oid] = entry
        # A new entry can change how arrays and domains over it convert.
        self._raw.clear()
        self._guarded.clear()

    def add_rows(self, rows: Iterable[Sequence[Any] | Mapping[str, Any]]) -> None:
        """Add the rows of :data:`TYPE_QUERY` (tuples or mappings)."""
        for row in rows:
            self.add(entry_from_row(row))

    def missing(self, oids: Iterable[int]) -> list[int]:
        """OIDs among ``oids`` (and the element and base types they need) not yet known."""
        missing: set[int] = set()
        stack = list(oids)
        seen: set[int] = set()
        while stack:
            oid = stack.pop()
            if oid in seen or oid == 0:
                continue
            seen.add(oid)
            entry = self._types.get(oid)
            if entry is None:
                missing.add(oid)
            else:
                stack.extend((entry.element_oid, entry.base_oid))
        return sorted(missing)

    def display_name(self, oid: int) -> str:
        """The type's name for messages: ``type_name(oid, -1)``."""
        return type_name(oid, -1, self)

    def raw_converter(self, oid: int, typmod: int = -1) -> Converter:
        """The converter of a column of type ``oid`` and ``typmod``, without error translation
        (may raise ``ValueError``...).

        :func:`row_converter` uses it and translates errors once per row instead.
        """
        conv = self._raw.get((oid, typmod))
        if conv is None:
            conv = self._raw[oid, typmod] = self._build(oid, typmod, 0)
        return conv

    def converter(self, oid: int, typmod: int = -1) -> Converter:
        """The converter of ``oid`` (and ``typmod``); unknown types convert to their text form
        unchanged.

        Its errors are :class:`ConversionError`.
        """
        conv = self._guarded.get((oid, typmod))
        if conv is None:
            raw = self.raw_converter(oid, typmod)
            conv = raw if raw is identity else _guard(raw, self.display_name(oid))
            self._guarded[oid, typmod] = conv
        return conv

    def resolved(self, oid: int) -> TypeEntry | None:
        """The entry of ``oid`` with domains followed to their base type; ``None`` when unknown,
        or past 16 domains (a corrupt catalog must not loop forever)."""
        entry = self._types.get(oid)
        for _ in range(16):
            if entry is None or entry.kind != "domain":
                return entry
            entry = self._types.get(entry.base_oid)
        return None

    def kind(self, oid: int, typmod: int = -1) -> TypeKind:
        """The kind of value ``oid`` converts to (:meth:`raw_converter`'s converter's)."""
        return converter_kind(self.raw_converter(oid, typmod))

    def base_typmod(self, oid: int, typmod: int) -> int:
        """The typmod that applies to a column's base type: a domain's own
        (``CREATE DOMAIN price AS numeric(12,2)``: the column's typmod is -1), else ``typmod``."""
        entry = self._types.get(oid)
        for _ in range(_MAX_DEPTH):
            if entry is None or entry.kind != "domain":
                break
            if entry.typmod >= 0:
                return entry.typmod
            entry = self._types.get(entry.base_oid)
        return typmod

    def _build(self, oid: int, typmod: int, depth: int) -> Converter:
        entry = self.resolved(oid)
        if entry is None or depth > _MAX_DEPTH:
            return identity
        typmod = self.base_typmod(oid, typmod)
        if entry.kind == "array":
            element = self._types.get(entry.element_oid)
            delimiter = element.delimiter if element is not None else ","
            # An array column's typmod is its elements' (numeric(12,2)[]).
            return array_parser(self._build(entry.element_oid, typmod, depth + 1), delimiter)
        return mode_converter(entry, typmod, self.options)


def _guard(raw: Converter, name: str) -> Converter:
    def convert(text: str) -> Any:
        try:
            return raw(text)
        except CONVERSION_FAILURES as exc:
            raise ConversionError(name, text, str(exc)) from exc

    return convert
