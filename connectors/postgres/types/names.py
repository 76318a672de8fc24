"""Type names as ``format_type`` writes them, for messages and schemas."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Protocol

from connectors.postgres.types.oids import TypeEntry

__all__ = ["type_name"]


class KnownTypes(Protocol):
    """Where a type's catalog entry is found by OID (a
    :class:`~connectors.postgres.types.registry.TypeRegistry`)."""

    def get(self, oid: int) -> TypeEntry | None: ...


# format_type() spellings of built-in types whose SQL name differs from typname.
_SQL_NAMES: Final[Mapping[int, str]] = {
    16: "boolean",
    18: '"char"',
    20: "bigint",
    21: "smallint",
    23: "integer",
    700: "real",
    701: "double precision",
    1043: "character varying",
    1562: "bit varying",
}
_VARHDRSZ: Final = 4  # character types store the length plus the varlena header size
_TEMPORAL: Final[Mapping[int, tuple[str, str]]] = {
    1083: ("time", " without time zone"),
    1266: ("time", " with time zone"),
    1114: ("timestamp", " without time zone"),
    1184: ("timestamp", " with time zone"),
}
# interval typmod: fields bit mask in the high 16 bits (datetime.h's YEAR=2, MONTH=1, DAY=3,
# HOUR=10, MINUTE=11, SECOND=12 bit numbers), precision in the low 16 bits.
_INTERVAL_FIELDS: Final[Mapping[int, str]] = {
    1 << 2: " year",
    1 << 1: " month",
    1 << 3: " day",
    1 << 10: " hour",
    1 << 11: " minute",
    1 << 12: " second",
    (1 << 2) | (1 << 1): " year to month",
    (1 << 3) | (1 << 10): " day to hour",
    (1 << 3) | (1 << 10) | (1 << 11): " day to minute",
    (1 << 3) | (1 << 10) | (1 << 11) | (1 << 12): " day to second",
    (1 << 10) | (1 << 11): " hour to minute",
    (1 << 10) | (1 << 11) | (1 << 12): " hour to second",
    (1 << 11) | (1 << 12): " minute to second",
}
_INTERVAL_FULL_PRECISION: Final = 0xFFFF


def _format_builtin(oid: int, typmod: int) -> str | None:
    """``format_type`` of built-in types with modifiers or special names; None for others."""
    if oid == 1700:
        return "numeric" if typmod < 0 else _numeric_typmod(typmod)
    if oid in (1042, 1043):
        base = "character" if oid == 1042 else "character varying"
        if typmod >= 0:
            return f"{base}({typmod - _VARHDRSZ})"
        # format_type writes 'bpchar' for bpchar without length: 'character' means char(1).
        return "bpchar" if oid == 1042 else base
    if oid in (1560, 1562):
        base = "bit" if oid == 1560 else "bit varying"
        if typmod >= 0:
            return f"{base}({typmod})"
        return '"bit"' if oid == 1560 else base  # same reason as bpchar
    if oid in _TEMPORAL:
        name, zone = _TEMPORAL[oid]
        return f"{name}({typmod}){zone}" if typmod >= 0 else f"{name}{zone}"
    if oid == 1186:
        return "interval" if typmod < 0 else _interval_typmod(typmod)
    return _SQL_NAMES.get(oid)


def _numeric_typmod(typmod: int) -> str:
    packed = typmod - _VARHDRSZ
    precision = (packed >> 16) & 0xFFFF
    scale = ((packed & 0x7FF) ^ 1024) - 1024  # 11-bit signed: PostgreSQL 15 allows scale < 0
    return f"numeric({precision},{scale})"


def _interval_typmod(typmod: int) -> str:
    fields = _INTERVAL_FIELDS.get((typmod >> 16) & 0x7FFF, "")
    precision = typmod & 0xFFFF
    if precision == _INTERVAL_FULL_PRECISION:
        return f"interval{fields}"
    return f"interval{fields}({precision})"


_PLAIN_IDENTIFIER: Final = re.compile(r"[a-z_][a-z0-9_$]*")


def _quote_ident(name: str) -> str:
    """Quote like ``quote_ident`` for names that need it (keywords are not detected)."""
    if _PLAIN_IDENTIFIER.fullmatch(name):
        return name
    return '"' + name.replace('"', '""') + '"'


def type_name(type_oid: int, type_modifier: int, registry: KnownTypes) -> str:
    """The SQL type as ``format_type(type_oid, type_modifier)`` writes it.

    For example ``numeric(12,2)``, ``character varying(20)``, ``timestamp(3) with time zone``,
    ``text[]``. User types are schema-qualified unless in ``pg_catalog`` or ``public``
    (``format_type`` decides by the search path, which a pure function cannot see); type
    modifiers of extension types are not rendered. Unknown OIDs give ``'oid:<n>'``.
    """
    entry = registry.get(type_oid)
    if entry is None:
        return f"oid:{type_oid}"
    if entry.kind == "array" and entry.element_oid:
        return type_name(entry.element_oid, type_modifier, registry) + "[]"
    special = _format_builtin(type_oid, type_modifier)
    if special is not None:
        return special
    name = _quote_ident(entry.name)
    if entry.namespace in ("pg_catalog", "public", ""):
        return name
    return f"{_quote_ident(entry.namespace)}.{name}"
