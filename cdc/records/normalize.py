"""Bring a row's values into one canonical, comparable form, by the column's source type.

Sources emit JSON-shaped values (exact decimal strings, ISO-8601 strings, base64 bytes); sinks
hand back their own types (``Decimal``, ``datetime``, ``bytes``, ``timedelta``). ``cdc verify``
normalises both through :func:`canonical` so that equal data compares equal.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
import struct
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

from cdc.contracts.schema import TableSchema
from cdc.records.normalize_far import far_temporal, utc_offset
from cdc.records.values import END_OF_DAY, Interval, numeric_value

_INTEGER = {"smallint", "integer", "bigint", "int2", "int4", "int8", "oid"}
_DOUBLE = {"double precision", "float8"}
_REAL = {"real", "float4"}
_ISO_DURATION = re.compile(
    r"^(-)?P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?"
    r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?[\d.]+)S)?)?$"
)
_MICROS_PER_DAY = 86_400_000_000
_DOCUMENT = {"json", "jsonb"}
_END_OF_DAY = re.compile(r"24:00:00(?:\.0+)?(?P<zone>Z|[+-]\d\d(?::?\d\d(?::?\d\d)?)?)?")


@functools.lru_cache(maxsize=4096)
def base_type(type_name: str) -> str:
    """``numeric(12,2)`` -> ``numeric``; ``character varying(20)`` -> ``character varying``."""
    return re.sub(r"\(.*?\)", "", type_name).strip()


def canonical(value: Any, type_name: str) -> Any:
    """``value`` in canonical form for a column of type ``type_name``."""
    if value is None:
        return None
    if type_name.endswith("[]"):
        if isinstance(value, str):
            value = orjson.loads(value)
        return _array(value, _element_type(type_name))
    kind = base_type(type_name)
    converter = _CONVERTERS.get(kind)
    if converter is not None:
        return converter(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict | list):
        return value
    return str(value)


def _element_type(type_name: str) -> str:
    # format_type writes one "[]" whatever the dimensions; a hand-written type may write more.
    while type_name.endswith("[]"):
        type_name = type_name[:-2]
    return type_name


def _array(values: list[Any], element: str) -> list[Any]:
    """Elements in canonical form, nested lists (more dimensions) kept nested, so a shape
    differing is a difference. A ``json``/``jsonb`` element that is a list is a document."""
    if base_type(element) in _DOCUMENT:
        return [canonical(v, element) for v in values]
    return [_array(v, element) if isinstance(v, list) else canonical(v, element) for v in values]


def canonical_row(row: dict[str, Any], schema: TableSchema) -> dict[str, Any]:
    """The row's columns of ``schema`` in canonical form (absent columns count as NULL)."""
    return {c.name: canonical(row.get(c.name), c.type) for c in schema.columns}


def converter(type_name: str, nulls: bool = True) -> Callable[[Any], Any]:
    """:func:`canonical` for one column type, chosen once: ``converter(t)(v) ==
    canonical(v, t)`` for every ``v``. ``cdc verify`` canonicalises every value of a table, and
    looking the type up again for each cost more than most conversions.

    ``nulls=False``: for values other than ``None`` only (a caller that tests for ``None``
    itself saves a call a value)."""
    convert = _value_converter(type_name)
    return functools.partial(_or_null, convert) if nulls else convert


def _value_converter(type_name: str) -> Callable[[Any], Any]:
    if type_name.endswith("[]"):
        element = _element_type(type_name)

        def array(value: Any) -> Any:
            if isinstance(value, str):
                value = orjson.loads(value)
            return _array(value, element)

        return array
    convert: Callable[[Any], Any] | None = _CONVERTERS.get(base_type(type_name))
    if convert is None:
        return _other
    if convert is int:
        return _integer
    return convert


def _or_null(convert: Callable[[Any], Any], value: Any) -> Any:
    return None if value is None else convert(value)


def _integer(value: Any) -> Any:
    return value if value.__class__ is int else int(value)


def _other(value: Any) -> Any:
    """A value of a type no converter knows: text (bytes in base64, documents as they are)."""
    if value.__class__ is str:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict | list):
        return value
    return str(value)


def _numeric(value: Any) -> str:
    try:  # Debezium's special names too: "POSITIVE_INFINITY" is PostgreSQL's Infinity
        number = numeric_value(value, None)
    except (InvalidOperation, ValueError, TypeError):
        return str(value)
    if not number.is_finite():
        return str(number).lower()
    normalized = number.normalize()
    return format(normalized, "f") if normalized == normalized.to_integral() else str(normalized)


_SPECIAL_FLOATS = {
    "nan": "nan",
    "infinity": "infinity",
    "inf": "infinity",
    "-infinity": "-infinity",
    "-inf": "-infinity",
}


def _float(value: Any, single: bool) -> Any:
    if isinstance(value, str):
        special = _SPECIAL_FLOATS.get(value.strip().lower())
        if special is not None:
            return special
    number = float(value)
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "infinity" if number > 0 else "-infinity"
    if single:  # a real survives a round trip through 32 bits on both sides
        number = float(struct.unpack("f", struct.pack("f", number))[0])
    return number


def _timestamp(value: Any, with_zone: bool) -> str:
    if isinstance(value, str):
        if value in ("infinity", "-infinity"):
            return value
        return far_temporal(value, with_zone, clock=True)
    if not isinstance(value, datetime):
        return str(value)
    moment: datetime = value
    if with_zone:
        moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.isoformat()


def _date(value: Any) -> str:
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str) and value not in ("infinity", "-infinity"):
        return far_temporal(value, False, clock=False)
    return str(value)


def _time(value: Any) -> str:
    if isinstance(value, time):
        moment = value
    else:
        text = str(value).strip()
        end = _END_OF_DAY.fullmatch(text)
        if end is not None:
            return _end_of_day(end["zone"])
        try:
            moment = time.fromisoformat(text)
        except ValueError:  # no time: a difference to report, not a crash
            return text
    if moment.tzinfo is not None:  # a timetz: Debezium writes it in UTC, a sink may keep the offset
        moment = datetime.combine(date(2000, 1, 3), moment).astimezone(UTC).timetz()
    return moment.isoformat()


def _end_of_day(zone: str | None) -> str:
    """PostgreSQL's 24:00:00, which Python's ``time`` cannot hold; with a zone, at UTC as any
    other ``timetz`` (``24:00:00+02`` is ``22:00:00+00:00``)."""
    if zone is None:
        return END_OF_DAY
    offset = utc_offset(zone).utcoffset(None)
    if not offset:
        return f"{END_OF_DAY}+00:00"
    utc = datetime(2000, 1, 4) - offset  # the next midnight, moved to UTC
    return utc.time().replace(tzinfo=UTC).isoformat()


def interval_micros(value: Any) -> int:
    """An interval as microseconds, counting a month as 30 days (as PostgreSQL's justify does)."""
    if isinstance(value, timedelta):
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if isinstance(value, Interval):
        return (value.months * 30 + value.days) * _MICROS_PER_DAY + value.microseconds
    if isinstance(value, int):  # interval.handling.mode: numeric
        return value
    match = _ISO_DURATION.match(str(value))
    if match is None:
        raise ValueError(f"not an ISO-8601 duration: {value!r}")
    sign, years, months, days, hours, minutes, seconds = match.groups()
    total_months = int(years or 0) * 12 + int(months or 0)
    micros = (total_months * 30 + int(days or 0)) * _MICROS_PER_DAY
    micros += (int(hours or 0) * 3600 + int(minutes or 0) * 60) * 1_000_000
    micros += int(Decimal(seconds or 0) * 1_000_000)
    return -micros if sign else micros


def _json(value: Any) -> str:
    """A document as compact JSON text with sorted keys: ``'"str"'``, ``'null'`` (JSON's null,
    which SQL NULL, ``None``, is not), ``'{"a":1}'``.

    Text (``str``, ``bytes``) is the document's JSON text, as the envelope and DuckDB's readers
    give it; anything else (``dict``, ``list``, a number, a bool) is a document already parsed.
    Text that is no JSON is kept as it is: a difference to report, not a crash.
    """
    if isinstance(value, str | bytes | bytearray):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            try:  # orjson refuses integers past 64 bits; JSON and jsonb allow them
                value = json.loads(value)
            except ValueError:
                return value if isinstance(value, str) else bytes(value).decode(errors="replace")
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # an integer past 64 bits
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _bytes(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    return str(value)


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() in ("t", "true", "1")
    return bool(value)


def _any_type(value: Any) -> Any:
    """A value of a column without a type (a schemaless source's field, as MongoDB's): a JSON
    value every side hands over parsed, kept with its type, so the number 5, the string "5"
    and ``true`` stay three values (as text they were one, and ``cdc verify`` missed a sink that
    changed a value's type, or two keys that became one)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, str | int | float | bool | dict | list):
        return value
    return str(value)


# Partials, not lambdas: a frame less for each value (cdc verify converts every value of a table).
_CONVERTERS: dict[str, Any] = {
    "": _any_type,
    **{name: int for name in _INTEGER},
    **{name: functools.partial(_float, single=False) for name in _DOUBLE},
    **{name: functools.partial(_float, single=True) for name in _REAL},
    "numeric": _numeric,
    "decimal": _numeric,
    "boolean": _bool,
    "bool": _bool,
    "timestamp with time zone": functools.partial(_timestamp, with_zone=True),
    "timestamptz": functools.partial(_timestamp, with_zone=True),
    "timestamp without time zone": functools.partial(_timestamp, with_zone=False),
    "timestamp": functools.partial(_timestamp, with_zone=False),
    "date": _date,
    "time without time zone": _time,
    "time": _time,
    "time with time zone": _time,
    "timetz": _time,
    "interval": interval_micros,
    "json": _json,
    "jsonb": _json,
    "bytea": _bytes,
    "uuid": lambda v: str(v).lower(),
}
