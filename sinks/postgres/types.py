"""Source type names to target column types, and values to what ``COPY`` takes.

Pure functions over the type names a source publishes (:attr:`cdc.contracts.schema.Column.type`),
tested without a server. The target is PostgreSQL, so a type it has keeps its name, modifiers
included, spelled as ``format_type`` spells it (so a column read back from ``pg_catalog`` maps to
itself, and a published type is compared with the column's by name):

* numbers, ``boolean``, strings, ``bytea``, temporal types, ``uuid``, ``json``/``jsonb``, the
  network types and ``xml`` keep their type; ``money`` becomes ``numeric`` (Debezium writes it
  as a decimal, and ``money``'s text depends on the target's ``lc_monetary``);
* arrays of those stay arrays (PostgreSQL's array types do not fix the dimensions);
* enums, domains and every other type become ``text`` holding the source's text (an enum the
  target has by the same name is used instead: :mod:`.enums`);
* a column without a type (a schemaless MongoDB field) is ``jsonb``.

Only type names built here from a closed list and digits ever reach SQL (and an enum's, as the
server's ``format_type`` spells it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, Final

import orjson

from cdc.envelope.options import EnvelopeOptions
from cdc.records.values import Interval, decoder, normalize_type

Convert = Callable[[Any], Any]

_SIMPLE: Final[dict[str, str]] = {
    "smallint": "smallint",
    "int2": "smallint",
    "integer": "integer",
    "int": "integer",
    "int4": "integer",
    "bigint": "bigint",
    "int8": "bigint",
    "oid": "bigint",
    "real": "real",
    "float4": "real",
    "double precision": "double precision",
    "float8": "double precision",
    "money": "numeric",
    "boolean": "boolean",
    "bool": "boolean",
    "text": "text",
    "bytea": "bytea",
    "date": "date",
    "uuid": "uuid",
    "json": "json",
    "jsonb": "jsonb",
    "inet": "inet",
    "cidr": "cidr",
    "macaddr": "macaddr",
    "macaddr8": "macaddr8",
    "xml": "xml",
    "timetz": "time with time zone",
    "timestamptz": "timestamp with time zone",
}
NUMERIC: Final = re.compile(r"(?:numeric|decimal)(?:\((\d+)(?:,\s*(-?\d+))?\))?")
_FLOAT: Final = re.compile(r"float(?:\((\d+)\))?")
STRING: Final = re.compile(r"(character varying|varchar|character|char|bpchar)(?:\((\d+)\))?")
_TEMPORAL: Final = re.compile(
    r"(time|timestamp)(?:\((\d+)\))?(?: (with|without) time zone)?|(timetz|timestamptz)\((\d+)\)"
)
_INTERVAL: Final = re.compile(r"interval(?: [a-z ]+?)?(?:\((\d+)\))?")


def target_type(source_type: str) -> str:
    """The target column type for a source type name (see the module docstring)."""
    name = normalize_type(source_type)
    if not name:
        return "jsonb"
    if name.endswith("[]"):
        element = name
        while element.endswith("[]"):
            element = element[:-2].rstrip()
        return _scalar(element) + "[]"
    return _scalar(name)


def _scalar(name: str) -> str:
    if name in _SIMPLE:
        return _SIMPLE[name]
    for pattern, build in _PATTERNS:
        match = pattern.fullmatch(name)
        if match is not None:
            return build(match)
    return "text"


def _numeric(match: re.Match[str]) -> str:
    precision, scale = match.groups()
    if precision is None:
        return "numeric"
    p, s = int(precision), int(scale or 0)
    # PostgreSQL 15+ takes a negative scale or one above the precision; 14 does not.
    return f"numeric({p},{s})" if 0 <= s <= p <= 1000 else "numeric"


def _float(match: re.Match[str]) -> str:
    bits = match.group(1)
    return "real" if bits is not None and int(bits) <= 24 else "double precision"


def _string(match: re.Match[str]) -> str:
    kind, length = match.groups()
    varying = kind in ("character varying", "varchar")
    if length is None:
        return "character varying" if varying else ("text" if kind == "bpchar" else "character(1)")
    return f"{'character varying' if varying else 'character'}({int(length)})"


def _temporal(match: re.Match[str]) -> str:
    base, precision, zone, short, short_precision = match.groups()
    if short is not None:  # timestamptz(3), timetz(3)
        base, precision, zone = short.removesuffix("tz"), short_precision, "with"
    digits = "" if precision is None else f"({min(int(precision), 6)})"
    return f"{base}{digits} {'with' if zone == 'with' else 'without'} time zone"


def _interval(match: re.Match[str]) -> str:
    # Fields (``day to second``) only restrict input: plain interval holds all of it.
    precision = match.group(1)
    return "interval" if precision is None else f"interval({min(int(precision), 6)})"


_PATTERNS: Final[list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]] = [
    (NUMERIC, _numeric),
    (_FLOAT, _float),
    (STRING, _string),
    (_TEMPORAL, _temporal),
    (_INTERVAL, _interval),
]

# -- values --------------------------------------------------------------------------------------


def converter(source_type: str, options: EnvelopeOptions | None) -> Convert:
    """The function from an envelope value of a ``source_type`` column to what ``COPY`` (text
    format, through psycopg's dumpers) writes into its target column."""
    target = target_type(source_type)
    if target == "jsonb" and not normalize_type(source_type):
        return _document
    decode = decoder(source_type, options)
    base = target.removesuffix("[]")
    if base.startswith("interval"):
        return lambda value: _intervals(decode(value))
    if base == "text" and normalize_type(source_type).removesuffix("[]") != "text":
        return lambda value: _texts(decode(value))
    if target.endswith("[]"):
        return lambda value: _uniform(decode(value))
    plain = _PLAIN_TEXT.get(re.sub(r"\(.*?\)", "", base))
    if plain is not None:
        return _passing(plain, decode)
    return decode


#: Envelope text the server parses as it stands, by target type: plain decimals, and ISO
#: instants of years 1000-9999 (``2024-03-01T12:00:00.5Z``). Handing it over as it is skips a
#: ``Decimal`` or ``datetime`` a value; anything else (``NAN``, far years, epoch numbers,
#: ``POSITIVE_INFINITY``) is decoded first.
_PLAIN_TEXT: Final = {
    "numeric": re.compile(r"-?\d{1,100}(?:\.\d{1,100})?").fullmatch,
    "timestamp with time zone": re.compile(
        r"[1-9]\d{3}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z"
    ).fullmatch,
    "timestamp without time zone": re.compile(
        r"[1-9]\d{3}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z?"
    ).fullmatch,
}


def _passing(plain: Callable[[str], Any], decode: Convert) -> Convert:
    def run(value: Any) -> Any:
        if value.__class__ is str and plain(value) is not None:
            return value
        return decode(value)

    return run


def _document(value: Any) -> Any:
    return None if value is None else orjson.dumps(value).decode()


def _intervals(value: Any) -> Any:
    if isinstance(value, list):
        return [_intervals(v) for v in value]
    if isinstance(value, Interval):
        # PostgreSQL keeps months, days and time apart; so does this text. The time as
        # H:MM:SS.ffffff: PostgreSQL 14 refuses a count of microseconds past 32 bits.
        sign = "-" if value.microseconds < 0 else ""
        seconds, micros = divmod(abs(value.microseconds), 1_000_000)
        minutes, second = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        clock = f"{sign}{hours}:{minute:02d}:{second:02d}.{micros:06d}"
        return f"{value.months} months {value.days} days {clock}"
    return value


def _uniform(value: Any) -> Any:
    """An array whose elements psycopg can dump: one Python type, or else all text.

    A date array holds ``date`` values and the text of those Python cannot hold (``infinity``,
    BC); psycopg dumps no mixed list, and the server parses the text of each alike.
    """
    if not isinstance(value, list):
        return value
    kinds = {type(v) for v in _leaves(value) if v is not None}
    return value if len(kinds) <= 1 else _as_text(value)


def _leaves(value: list[Any]) -> Iterator[Any]:
    for item in value:
        if isinstance(item, list):
            yield from _leaves(item)
        else:
            yield item


def _as_text(value: Any) -> Any:
    if isinstance(value, list):
        return [_as_text(v) for v in value]
    return None if value is None else str(value)


def _texts(value: Any) -> Any:
    """A value of a type kept as text (an enum, a range, a geometric type): its text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        return [_texts(v) for v in value]
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    return str(value)
