"""The type registry: type OID -> catalog entry, converter and value kind."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from connectors.postgres.types.arrays import array_parser
from connectors.postgres.types.errors import CONVERSION_FAILURES, ConversionError
from connectors.postgres.types.kinds import TypeKind
from connectors.postgres.types.names import type_name
from connectors.postgres.types.oids import BUILTINS, TypeEntry, entry_from_row
from connectors.postgres.types.scalars import (
    BUILTIN_CONVERTERS,
    Converter,
    converter_kind,
    identity,
)

__all__ = ["TypeRegistry"]

_JSONB_OID: Final = 3802


class TypeRegistry:
    """Type OID -> :class:`TypeEntry` and cached converters; built-in types are preloaded.

    The source adds user types (enums, domains, their arrays) from :data:`TYPE_QUERY` rows
    when a ``Relation`` mentions an OID that :meth:`missing` reports.
    """

    def __init__(self) -> None:
        self._types: dict[int, TypeEntry] = dict(BUILTINS)
        self._raw: dict[int, Converter] = {}
        self._guarded: dict[int, Converter] = {}

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

    def raw_converter(self, oid: int) -> Converter:
        """The converter of ``oid`` without error translation (may raise ``ValueError``...).

        :func:`row_converter` uses it and translates errors once per row instead.
        """
        conv = self._raw.get(oid)
        if conv is None:
            conv = self._raw[oid] = self._build(oid, 0)
        return conv

    def converter(self, oid: int) -> Converter:
        """The converter of ``oid``; unknown types convert to their text form unchanged.

        Its errors are :class:`ConversionError`.
        """
        conv = self._guarded.get(oid)
        if conv is None:
            raw = self.raw_converter(oid)
            conv = raw if raw is identity else _guard(raw, self.display_name(oid))
            self._guarded[oid] = conv
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

    def kind(self, oid: int) -> TypeKind:
        """The kind of value ``oid`` converts to, domains followed to their base type.

        The kind of :meth:`raw_converter`'s converter, except ``jsonb``: it shares ``json``'s
        converter, but the server normalises its text, whereas ``json`` text keeps duplicate
        keys and any escapes as typed; the native encoder relies on that.
        """
        entry = self.resolved(oid)
        if entry is not None and entry.oid == _JSONB_OID:
            return TypeKind.JSONB
        return converter_kind(self.raw_converter(oid))

    def _build(self, oid: int, depth: int) -> Converter:
        entry = self.resolved(oid)
        if entry is None or depth > 16:  # depth: arrays of arrays of a corrupt catalog
            return identity
        if entry.kind == "array":
            element = self._types.get(entry.element_oid)
            delimiter = element.delimiter if element is not None else ","
            return array_parser(self._build(entry.element_oid, depth + 1), delimiter)
        if entry.kind == "base":
            return BUILTIN_CONVERTERS.get(entry.oid, identity)
        return identity


def _guard(raw: Converter, name: str) -> Converter:
    def convert(text: str) -> Any:
        try:
            return raw(text)
        except CONVERSION_FAILURES as exc:
            raise ConversionError(name, text, str(exc)) from exc

    return convert
