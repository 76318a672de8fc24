"""Which converter a column gets under the pipeline's envelope options: chosen once per column
from its type, typmod and :class:`~cdc.envelope.options.EnvelopeOptions`, never per value.

The forms are Debezium 3.6.1's (``tests/debezium/OBSERVED.md``); types this module does not
name keep the :data:`~connectors.postgres.types.scalars.BUILTIN_CONVERTERS` form (or their text),
and are not compared with Debezium (see ``docs``: geometric types, ranges, ``inet`` & co.).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Final

from cdc.envelope.options import EnvelopeOptions
from connectors.postgres.types import decimals, temporal
from connectors.postgres.types.hstore import hstore_converter
from connectors.postgres.types.kinds import TypeKind
from connectors.postgres.types.oids import TypeEntry
from connectors.postgres.types.scalars import BUILTIN_CONVERTERS, Converter, bytea_bytes, identity

__all__ = ["CONVERTER_KINDS", "converter_kind", "mode_converter", "time_precision"]

# Type OIDs (fixed since PostgreSQL 7).
BYTEA, JSON, JSONB, MONEY, NUMERIC = 17, 114, 3802, 790, 1700
DATE, TIME, TIMETZ, TIMESTAMP, TIMESTAMPTZ, INTERVAL = 1082, 1083, 1266, 1114, 1184, 1186


def time_precision(typmod: int) -> int:
    """The fraction digits of ``time(p)``/``timestamp(p)``: ``p``, or -1 (6) without one."""
    return typmod if 0 <= typmod <= 6 else -1


def _bytea_base64(text: str) -> str:
    return base64.b64encode(bytea_bytes(text)).decode("ascii")


def _bytea_urlsafe(text: str) -> str:
    return base64.urlsafe_b64encode(bytea_bytes(text)).decode("ascii")


def _bytea_hex(text: str) -> str:
    if text.startswith("\\x"):  # bytea_output=hex: the server's digits, lower-cased
        bytes.fromhex(text[2:])  # raises on bad hex
        return text[2:].lower()
    return bytea_bytes(text).hex()


_BYTEA: Final[dict[str, Converter]] = {
    "bytes": _bytea_base64,  # JSON has no bytes: the JsonConverter writes them as base64
    "base64": _bytea_base64,
    "base64-url-safe": _bytea_urlsafe,
    "hex": _bytea_hex,
}


def _by_options(oid: int, typmod: int, options: EnvelopeOptions) -> Converter | None:
    """The converter of a built-in type whose form depends on the options, else ``None``."""
    time_mode = options.time_precision_mode
    builders: dict[int, Callable[[], Converter]] = {
        NUMERIC: lambda: decimals.numeric_converter(options.decimal_handling_mode, typmod),
        MONEY: lambda: decimals.money_converter(options.decimal_handling_mode),
        BYTEA: lambda: _BYTEA[options.binary_handling_mode],
        DATE: lambda: temporal.date_converter(time_mode),
        TIME: lambda: temporal.time_converter(time_mode, time_precision(typmod)),
        TIMESTAMP: lambda: temporal.timestamp_converter(time_mode, time_precision(typmod)),
        TIMESTAMPTZ: lambda: temporal.timestamptz_converter(time_precision(typmod)),
        INTERVAL: lambda: temporal.interval_converter(options.interval_handling_mode),
    }
    build = builders.get(oid)
    return None if build is None else build()


#: Built-in types written the same in every mode.
_FIXED: Final[dict[int, Converter]] = {
    TIMETZ: temporal.timetz,
    JSON: identity,  # io.debezium.data.Json: a string holding the server's text
    JSONB: identity,
}


def mode_converter(entry: TypeEntry, typmod: int, options: EnvelopeOptions) -> Converter:
    """The converter of a base or enum type (domains resolved, arrays handled by the caller)."""
    if entry.kind == "base" and entry.namespace == "pg_catalog":
        chosen = _by_options(entry.oid, typmod, options)
        if chosen is not None:
            return chosen
        fixed = _FIXED.get(entry.oid)
        if fixed is not None:
            return fixed
        return BUILTIN_CONVERTERS.get(entry.oid, identity)
    if entry.kind == "base" and entry.name == "hstore":  # an extension's type: by name
        return hstore_converter(options.hstore_handling_mode)
    return identity


CONVERTER_KINDS: Final[dict[Converter, TypeKind]] = {
    identity: TypeKind.TEXT,
    int: TypeKind.INT,
    BUILTIN_CONVERTERS[16]: TypeKind.BOOL,
    **{
        convert: TypeKind.timestamptz(width)
        for width, convert in temporal.TIMESTAMPTZ_BY_PRECISION.items()
    },
    temporal.iso_timestamp: TypeKind.ISO_TIMESTAMP,
    temporal.iso_date: TypeKind.ISO_DATE,
    temporal.iso_time: TypeKind.ISO_TIME,
    decimals.numeric_string: TypeKind.NUMERIC_STRING,
}
"""The kind of value each converter above produces, which the native encoder writes itself;
any other converter is :attr:`TypeKind.PYTHON` (see :func:`converter_kind`)."""


def converter_kind(convert: Converter) -> TypeKind:
    """The kind of value ``convert`` produces: what the native encoder may write itself."""
    return CONVERTER_KINDS.get(convert, TypeKind.PYTHON)
