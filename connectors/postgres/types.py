"""Convert PostgreSQL text-format values into faithful, JSON-ready Python values.

pgoutput sends column values in their text output form. This module maps each type to a pure
``str -> value`` function whose result orjson serialises without losing anything:

================================  ==============================================================
integers, ``oid``                 ``int``
``numeric``, ``money``            ``str``: the exact text (``'NaN'``, ``'Infinity'`` too), as
                                  Debezium's ``decimal.handling.mode=string``
``float4``, ``float8``            ``float``; ``'NaN'``, ``'Infinity'``, ``'-Infinity'`` stay
                                  strings (JSON has no such numbers)
``bool``                          ``bool``
``bytea``                         base64 ``str``
``date``, ``time``                ISO text as sent (``'infinity'``, ``BC`` dates kept as text)
``timetz``                        ``'HH:MM:SS[.ffffff]+HH:MM'``
``timestamp``                     ``'YYYY-MM-DDTHH:MM:SS[.ffffff]'`` (fraction as sent)
``timestamptz``                   the same in UTC with ``'Z'``
``interval``                      ISO-8601 duration, see :func:`interval_to_iso`
``json``, ``jsonb``               parsed; see :func:`parse_json` for big numbers
arrays                            nested lists of converted elements, ``NULL`` -> ``None``
domains                           converted as their base type
anything else                     the text as sent (enums, uuid, inet, ranges, composites...)
================================  ==============================================================

The parsers expect the text forms of these settings, which the replication connection should
set (see :data:`TEXT_FORMAT_SETTINGS`); anything else is a :class:`ConversionError`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

import orjson

from cdc.errors import RecordError

if TYPE_CHECKING:
    from connectors.postgres.pgoutput import RelationColumn, TupleData

__all__ = [
    "TEXT_FORMAT_SETTINGS",
    "TYPE_QUERY",
    "ConversionError",
    "Converter",
    "TypeEntry",
    "TypeRegistry",
    "row_converter",
    "type_name",
]

Converter = Callable[[str], Any]

TEXT_FORMAT_SETTINGS: Final[Mapping[str, str]] = {
    "DateStyle": "ISO, MDY",
    "TimeZone": "UTC",
    "IntervalStyle": "postgres",
    "bytea_output": "hex",
    "extra_float_digits": "1",
}
"""Session settings whose output formats the converters parse: pass them as ``options`` of the
replication connection (``-c DateStyle=ISO,MDY ...``), since the walsender formats values with
its own session's settings. ``TimeZone=UTC`` is for speed only: timestamptz values then arrive
in UTC already (other offsets are converted, more slowly)."""

TYPE_QUERY: Final = """\
WITH RECURSIVE wanted(oid) AS (
    SELECT unnest(%s::pg_catalog.oid[])
  UNION
    SELECT dep.oid
    FROM wanted AS w
    JOIN pg_catalog.pg_type AS t ON t.oid = w.oid
    CROSS JOIN LATERAL (VALUES (t.typelem), (t.typbasetype)) AS dep(oid)
    WHERE dep.oid <> 0
)
SELECT t.oid::int8, t.typname::text, t.typtype::text, t.typelem::int8, t.typbasetype::int8,
       t.typdelim::text, t.typcategory::text, n.nspname::text
FROM wanted AS w
JOIN pg_catalog.pg_type AS t ON t.oid = w.oid
JOIN pg_catalog.pg_namespace AS n ON n.oid = t.typnamespace
"""
"""Catalog rows for the given type OIDs and, recursively, their element and base types.

One parameter: a list of OIDs (``cur.execute(TYPE_QUERY, (oids,))``). Columns: ``oid, typname,
typtype, typelem, typbasetype, typdelim, typcategory, nspname``; pass the rows (tuples or
dict rows) to :meth:`TypeRegistry.add_rows`.
"""


class ConversionError(RecordError):
    """A column value cannot be converted; names the type, the value (cut to 100 characters)
    and, when known, the column."""

    def __init__(self, type_name: str, value: str, reason: str, column: str | None = None):
        self.type_name = type_name
        self.value = value[:100]
        self.reason = reason
        self.column = column
        where = f" in column {column!r}" if column is not None else ""
        super().__init__(f"cannot convert {type_name} value {self.value!r}{where}: {reason}")


# --- scalar converters: pure str -> value; they raise ValueError (or kin) on bad input ---

_CONVERSION_FAILURES: Final = (ValueError, LookupError, ArithmeticError, TypeError)


def _identity(text: str) -> str:
    return text


_FLOAT_SPECIALS: Final = frozenset({"NaN", "Infinity", "-Infinity"})


def _float(text: str) -> float | str:
    # JSON has no NaN or infinities (orjson would write null): keep PostgreSQL's spelling.
    return text if text in _FLOAT_SPECIALS else float(text)


def _bool(text: str) -> bool:
    if text == "t":
        return True
    if text == "f":
        return False
    raise ValueError("expected 't' or 'f'")


_BYTEA_ESCAPE: Final = re.compile(r"\\(\\|[0-3][0-7]{2})")


def _bytea(text: str) -> str:
    if text.startswith("\\x"):
        raw = bytes.fromhex(text[2:])
    else:  # bytea_output=escape: printable ASCII, '\\' and '\ooo' octal escapes
        if "\\" in _BYTEA_ESCAPE.sub("", text):
            raise ValueError("invalid bytea escape")
        raw = _BYTEA_ESCAPE.sub(_unescape_octet, text).encode("latin-1")
    return base64.b64encode(raw).decode("ascii")


def _unescape_octet(match: re.Match[str]) -> str:
    code = match.group(1)
    return "\\" if code == "\\" else chr(int(code, 8))


def _checked(pattern: str, what: str, fast: Callable[[str], bool]) -> Converter:
    """A converter returning the text unchanged once ``fast`` or else ``pattern`` accepts it."""
    fullmatch = re.compile(pattern).fullmatch

    def convert(text: str) -> str:
        if not fast(text) and fullmatch(text) is None:
            raise ValueError(f"not an ISO {what} (is DateStyle ISO?)")
        return text

    return convert


def _plain_date(text: str) -> bool:
    return len(text) == 10 and text[4] == "-" and text[7] == "-"


def _plain_time(text: str) -> bool:
    return 8 <= len(text) <= 15 and text[2] == ":" and text[5] == ":"


_TIME = r"\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?"
_date = _checked(r"\d{4,}-\d{2}-\d{2}(?: BC)?|-?infinity", "date", _plain_date)
_time = _checked(_TIME, "time", _plain_time)
_TIMETZ: Final = re.compile(rf"({_TIME})([+-]\d{{2}})(?::(\d{{2}}))?(:\d{{2}})?")
_TIMESTAMP: Final = re.compile(rf"(\d{{4,}}-\d{{2}}-\d{{2}}) ({_TIME})( BC)?")
_TIMESTAMPTZ: Final = re.compile(
    r"(\d{4,})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(\.\d{1,6})?"
    r"([+-])(\d{2})(?::(\d{2}))?(?::(\d{2}))?( BC)?"
)
_INFINITIES: Final = frozenset({"infinity", "-infinity"})


def _timetz(text: str) -> str:
    match = _TIMETZ.fullmatch(text)
    if match is None:
        raise ValueError("not an ISO time with time zone")
    clock, hours, minutes, seconds = match.groups()
    # ISO-8601 wants '+HH:MM'; PostgreSQL drops ':00' minutes ('+05', '-08').
    return f"{clock}{hours}:{minutes or '00'}{seconds or ''}"


def _is_iso_stamp(text: str) -> bool:
    """Cheap shape check of 'YYYY-MM-DD HH:MM:SS...' with a 4-digit year (the hot path)."""
    return len(text) >= 19 and text[4] == "-" and text[10] == " " and text[13] == ":"


def _timestamp(text: str) -> str:
    if _is_iso_stamp(text) and text[-1] != "C":  # 'BC' needs the full parse below
        return f"{text[:10]}T{text[11:]}"
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        if text in _INFINITIES:
            return text
        raise ValueError("not an ISO timestamp (is DateStyle ISO?)")
    day, clock, bc = match.groups()
    return text if bc else f"{day}T{clock}"  # ISO-8601 has no 'BC': keep the server's text


_GREGORIAN_CYCLE_YEARS: Final = 400  # the proleptic Gregorian calendar repeats every 400 years


def _timestamptz(text: str) -> str:
    # With TimeZone=UTC on the session (TEXT_FORMAT_SETTINGS) every value ends in '+00'.
    if text[-3:] == "+00" and _is_iso_stamp(text):
        return f"{text[:10]}T{text[11:-3]}Z"
    match = _TIMESTAMPTZ.fullmatch(text)
    if match is None:
        if text in _INFINITIES:
            return text
        raise ValueError("not an ISO timestamp with time zone (is DateStyle ISO?)")
    year, month, day, hour, minute, second, fraction, sign, oh, om, osec, bc = match.groups()
    if bc:
        return text
    offset = int(oh) * 3600 + int(om or 0) * 60 + int(osec or 0)
    # Shift into datetime's range by whole 400-year cycles so years past 9999 work too; the
    # fraction is untouched because offsets are whole seconds.
    cycles = (int(year) - 2000) // _GREGORIAN_CYCLE_YEARS
    local = datetime(
        int(year) - cycles * _GREGORIAN_CYCLE_YEARS,
        int(month),
        int(day),
        int(hour),
        int(minute),
        int(second),
    )
    u = local - timedelta(seconds=offset if sign == "+" else -offset)
    year_utc = u.year + cycles * _GREGORIAN_CYCLE_YEARS
    return (
        f"{year_utc:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
        f"{fraction or ''}Z"
    )


_INTERVAL: Final = re.compile(
    r"(?:([+-]?\d+) years? ?)?(?:([+-]?\d+) mons? ?)?(?:([+-]?\d+) days? ?)?"
    r"(?:([+-])?(\d+):(\d{2}):(\d{2})(\.\d{1,6})?)?"
)


def interval_to_iso(text: str) -> str:
    """An interval in IntervalStyle ``postgres`` as an ISO-8601 duration.

    Each part keeps its own sign: PostgreSQL stores months, days and time separately, and they
    do not convert into one another (a month has no fixed number of days), so folding them
    into one signed duration would change the value. ``'1 year 2 mons 3 days 04:05:06.5'`` ->
    ``'P1Y2M3DT4H5M6.5S'``, ``'-1 days +02:03:00'`` -> ``'P-1DT2H3M'``, ``'-00:00:01.5'`` ->
    ``'PT-1.5S'``; hours are not folded into days (``'100:00:00'`` -> ``'PT100H'``). Zero parts
    are left out; a zero interval is ``'PT0S'``. Text already in ISO form (IntervalStyle
    ``iso_8601``) and ``infinity`` pass through.

    Raises:
        ValueError: not in the ``postgres`` or ``iso_8601`` style.
    """
    match = _INTERVAL.fullmatch(text)
    if match is None or not text:
        if text.startswith("P") or text in _INFINITIES:
            return text
        raise ValueError("not an interval in IntervalStyle postgres")
    years, months, days, sign, hours, minutes, seconds, fraction = match.groups()
    minus = "-" if sign == "-" else ""
    date_part = "".join(
        f"{int(value)}{unit}"
        for value, unit in ((years, "Y"), (months, "M"), (days, "D"))
        if value and int(value)
    )
    time_part = ""
    if hours is not None:
        whole = int(seconds)
        frac = fraction or ""
        parts = ((int(hours), "H", ""), (int(minutes), "M", ""), (whole, "S", frac))
        time_part = "".join(
            f"{minus}{value}{frac_text}{unit}"
            for value, unit, frac_text in parts
            if value or frac_text
        )
    if not date_part and not time_part:
        return "PT0S"
    return f"P{date_part}" + (f"T{time_part}" if time_part else "")


# Numbers orjson may not keep exact: 16+ digits (a double holds 15 safely), or beyond 64 bits.
_LONG_NUMBER: Final = re.compile(r"[\d.]{16,}")
_INT64_MIN, _UINT64_MAX = -(1 << 63), (1 << 64) - 1


def parse_json(text: str) -> Any:
    """Parse ``json``/``jsonb`` text, keeping every number exact.

    orjson parses the common case. A number that would lose digits as a double (more than 15
    significant digits, or an integer past 64 bits, which orjson turns into a float) becomes
    an ``orjson.Fragment`` holding the number's text: the envelope's ``orjson.dumps`` writes it
    back verbatim as a JSON number, so ``jsonb`` numerics stay exact end to end. A fractional
    or exponent number beyond the double range (``1e999``, possible in ``json``) is rejected:
    most JSON readers cannot hold it, so it is left to the error policy.

    Raises:
        ValueError: invalid JSON, or a number out of the double range.
    """
    if _LONG_NUMBER.search(text) is None:
        return orjson.loads(text)
    return json.loads(text, parse_int=_json_int, parse_float=_json_float)


def _json_int(text: str) -> int | orjson.Fragment:
    # The length test first: int() of a very long text is slow, and refused past 4300 digits.
    if len(text) <= 20:
        value = int(text)
        if _INT64_MIN <= value <= _UINT64_MAX:
            return value
    return orjson.Fragment(text)


def _json_float(text: str) -> float | orjson.Fragment:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"JSON number out of range for a double: {text[:40]}")
    # Exact when the shortest repr (what orjson writes) names the same decimal number.
    if _same_decimal(repr(value), text):
        return value
    return orjson.Fragment(text)


def _same_decimal(left: str, right: str) -> bool:
    return Decimal(left) == Decimal(right)


# --- arrays: '{1,2,NULL}', '{{1,2},{3,4}}', '[0:1]={1,2}', '{"a\\"b",c}' ---

_QUOTED: Final = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)
_ESCAPED: Final = re.compile(r"\\(.)", re.DOTALL)


def _array_parser(element: Converter, delimiter: str) -> Converter:
    """A converter of an array's text whose elements ``element`` converts."""
    convert = None if element is _identity else element
    unquoted = re.compile(r"[^" + re.escape(delimiter) + r"}]*").match

    def parse(text: str) -> list[Any]:
        if text.startswith("["):  # explicit lower bounds: '[0:1]={1,2}'; keep the elements
            text = text[text.index("=") + 1 :]
        if '"' not in text and "{" not in text[1:]:
            return _flat(text, convert, delimiter)
        values, end = _nested(text, 0, convert, delimiter, unquoted)
        if end != len(text):
            raise ValueError(f"trailing text after array at offset {end}")
        return values

    return parse


def _flat(text: str, convert: Converter | None, delimiter: str) -> list[Any]:
    """A one-dimensional array without quoted elements: a split does it."""
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("array text must be enclosed in braces")
    inner = text[1:-1]
    if not inner:
        return []
    if convert is None:
        return [None if item == "NULL" else item for item in inner.split(delimiter)]
    return [None if item == "NULL" else convert(item) for item in inner.split(delimiter)]


def _nested(
    text: str,
    pos: int,
    convert: Converter | None,
    delimiter: str,
    unquoted: Callable[[str, int], re.Match[str] | None],
) -> tuple[list[Any], int]:
    """The array starting at ``text[pos] == '{'`` and the position after its ``'}'``."""
    if text[pos] != "{":
        raise ValueError(f"expected '{{' at offset {pos}")
    pos += 1
    values: list[Any] = []
    value: Any
    if text[pos] == "}":
        return values, pos + 1
    while True:
        char = text[pos]
        if char == "{":
            value, pos = _nested(text, pos, convert, delimiter, unquoted)
        elif char == '"':
            quoted = _QUOTED.match(text, pos)
            if quoted is None:
                raise ValueError(f"unterminated quoted element at offset {pos}")
            item = _ESCAPED.sub(r"\1", quoted.group(1))
            value = item if convert is None else convert(item)
            pos = quoted.end()
        else:
            bare = unquoted(text, pos)
            item = bare.group() if bare is not None else ""
            pos += len(item)
            value = None if item == "NULL" else item if convert is None else convert(item)
        values.append(value)
        char = text[pos]
        if char == "}":
            return values, pos + 1
        if char != delimiter:
            raise ValueError(f"expected {delimiter!r} or '}}' at offset {pos}")
        pos += 1


# --- built-in types (OIDs are fixed by the server version; PostgreSQL 15) ---

# oid, typname, typtype, typcategory, array type oid (from pg_type of PostgreSQL 15).
_BUILTIN_TABLE: Final = """\
16    bool            b B 1000
17    bytea           b U 1001
18    char            b Z 1002
19    name            b S 1003
20    int8            b N 1016
21    int2            b N 1005
22    int2vector      b A 1006
23    int4            b N 1007
24    regproc         b N 1008
25    text            b S 1009
26    oid             b N 1028
27    tid             b U 1010
28    xid             b U 1011
29    cid             b U 1012
30    oidvector       b A 1013
114   json            b U 199
142   xml             b U 143
600   point           b G 1017
601   lseg            b G 1018
602   path            b G 1019
603   box             b G 1020
604   polygon         b G 1027
628   line            b G 629
650   cidr            b I 651
700   float4          b N 1021
701   float8          b N 1022
718   circle          b G 719
774   macaddr8        b U 775
790   money           b N 791
829   macaddr         b U 1040
869   inet            b I 1041
1042  bpchar          b S 1014
1043  varchar         b S 1015
1082  date            b D 1182
1083  time            b D 1183
1114  timestamp       b D 1115
1184  timestamptz     b D 1185
1186  interval        b T 1187
1266  timetz          b D 1270
1560  bit             b V 1561
1562  varbit          b V 1563
1700  numeric         b N 1231
2205  regclass        b N 2210
2206  regtype         b N 2211
2249  record          p P 2287
2950  uuid            b U 2951
3220  pg_lsn          b U 3221
3614  tsvector        b U 3643
3615  tsquery         b U 3645
3802  jsonb           b U 3807
3904  int4range       r R 3905
3906  numrange        r R 3907
3908  tsrange         r R 3909
3910  tstzrange       r R 3911
3912  daterange       r R 3913
3926  int8range       r R 3927
4072  jsonpath        b U 4073
4451  int4multirange  m R 6150
4532  nummultirange   m R 6151
4533  tsmultirange    m R 6152
4534  tstzmultirange  m R 6153
4535  datemultirange  m R 6155
4536  int8multirange  m R 6157
5069  xid8            b U 271
"""


_BUILTIN_CONVERTERS: Final[Mapping[int, Converter]] = {
    16: _bool,
    17: _bytea,
    20: int,
    21: int,
    23: int,
    26: int,
    28: int,
    29: int,
    5069: int,
    700: _float,
    701: _float,
    114: parse_json,
    3802: parse_json,
    1082: _date,
    1083: _time,
    1266: _timetz,
    1114: _timestamp,
    1184: _timestamptz,
    1186: interval_to_iso,
}

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


@dataclass(frozen=True, slots=True)
class TypeEntry:
    """What the registry knows of one type.

    Attributes:
        kind: ``'base'``, ``'array'``, ``'enum'``, ``'domain'``, ``'composite'``, ``'range'``,
            ``'multirange'`` or ``'pseudo'``.
        element_oid: the element type of an array, else 0.
        base_oid: the underlying type of a domain, else 0.
        delimiter: separates this type's values in an array's text (``;`` for ``box``).
    """

    oid: int
    name: str
    kind: str
    element_oid: int = 0
    base_oid: int = 0
    delimiter: str = ","
    category: str = ""
    namespace: str = "pg_catalog"


_KINDS: Final = {
    "b": "base",
    "c": "composite",
    "d": "domain",
    "e": "enum",
    "p": "pseudo",
    "r": "range",
    "m": "multirange",
}


def _builtins() -> dict[int, TypeEntry]:
    entries: dict[int, TypeEntry] = {}
    for line in _BUILTIN_TABLE.splitlines():
        oid, name, typtype, category, array_oid = line.split()
        # box is the one built-in type whose arrays are not comma-separated.
        delimiter = ";" if name == "box" else ","
        entries[int(oid)] = TypeEntry(
            int(oid), name, _KINDS[typtype], delimiter=delimiter, category=category
        )
        entries[int(array_oid)] = TypeEntry(
            int(array_oid), "_" + name, "array", int(oid), category="A"
        )
    return entries


_BUILTINS: Final = _builtins()


def _entry_from_row(row: Sequence[Any] | Mapping[str, Any]) -> TypeEntry:
    """A :class:`TypeEntry` from one :data:`TYPE_QUERY` row."""
    if isinstance(row, Mapping):
        fields = [row[k] for k in ("oid", "typname", "typtype", "typelem", "typbasetype")]
        fields += [row["typdelim"], row["typcategory"], row.get("nspname", "")]
    else:
        fields = list(row) + [""] * (8 - len(row))
    oid, name, typtype, elem, base, delim, category, namespace = fields
    kind = _KINDS.get(str(typtype), "base")
    if kind == "base" and category == "A" and int(elem) != 0:
        kind = "array"
    return TypeEntry(
        int(oid),
        str(name),
        kind,
        int(elem) if kind == "array" else 0,
        int(base) if kind == "domain" else 0,
        str(delim) or ",",
        str(category),
        str(namespace),
    )


class TypeRegistry:
    """Type OID -> :class:`TypeEntry` and cached converters; built-in types are preloaded.

    The source adds user types (enums, domains, their arrays) from :data:`TYPE_QUERY` rows
    when a ``Relation`` mentions an OID that :meth:`missing` reports.
    """

    def __init__(self) -> None:
        self._types: dict[int, TypeEntry] = dict(_BUILTINS)
        self._raw: dict[int, Converter] = {}
        self._guarded: dict[int, Converter] = {}

    def __contains__(self, oid: object) -> bool:
        return oid in self._types

    def get(self, oid: int) -> TypeEntry | None:
        """The entry of ``oid``, if known."""
        return self._types.get(oid)

    def add(self, entry: TypeEntry) -> None:
        """Add or replace a type; built-in types cannot be replaced."""
        if entry.oid in _BUILTINS:
            return
        self._types[entry.oid] = entry
        # A new entry can change how arrays and domains over it convert.
        self._raw.clear()
        self._guarded.clear()

    def add_rows(self, rows: Iterable[Sequence[Any] | Mapping[str, Any]]) -> None:
        """Add the rows of :data:`TYPE_QUERY` (tuples or mappings)."""
        for row in rows:
            self.add(_entry_from_row(row))

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
            conv = raw if raw is _identity else _guard(raw, self.display_name(oid))
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

    def _build(self, oid: int, depth: int) -> Converter:
        entry = self.resolved(oid)
        if entry is None or depth > 16:  # depth: arrays of arrays of a corrupt catalog
            return _identity
        if entry.kind == "array":
            element = self._types.get(entry.element_oid)
            delimiter = element.delimiter if element is not None else ","
            return _array_parser(self._build(entry.element_oid, depth + 1), delimiter)
        if entry.kind == "base":
            return _BUILTIN_CONVERTERS.get(entry.oid, _identity)
        return _identity


def _guard(raw: Converter, name: str) -> Converter:
    def convert(text: str) -> Any:
        try:
            return raw(text)
        except _CONVERSION_FAILURES as exc:
            raise ConversionError(name, text, str(exc)) from exc

    return convert


def row_converter(
    columns: Sequence[RelationColumn], registry: TypeRegistry
) -> Callable[[TupleData], dict[str, Any]]:
    """A function turning one tuple of a relation into a row dict, column name -> value.

    Converters are looked up once here, not per row. ``None`` stays ``None``, the
    ``UNCHANGED`` sentinel passes through for the source to fill from the previous image, and
    binary values (``bytes``) pass through (the envelope writes them as base64).

    Raises (from the returned function):
        ConversionError: a value does not parse, or the tuple has the wrong column count.
    """
    names = tuple(column.name for column in columns)
    raws = tuple(registry.raw_converter(column.type_oid) for column in columns)
    # None marks text passed through as is: skipping the call is the common case's speed-up.
    plan = tuple(
        (name, None if raw is _identity else raw) for name, raw in zip(names, raws, strict=True)
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
        except _CONVERSION_FAILURES:
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
        except _CONVERSION_FAILURES as exc:
            type_text = type_name(column.type_oid, column.type_modifier, registry)
            return ConversionError(type_text, value, str(exc), column=name)
    return ConversionError("row", repr(values), "conversion failed")


def type_name(type_oid: int, type_modifier: int, registry: TypeRegistry) -> str:
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
