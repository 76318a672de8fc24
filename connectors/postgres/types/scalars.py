"""The scalar converters: pure ``str -> value`` functions over PostgreSQL's text output forms.

They raise ``ValueError`` (or kin, see :data:`~connectors.postgres.types.errors.
CONVERSION_FAILURES`) on bad input; the registry and the row converter translate that into a
:class:`~connectors.postgres.types.errors.ConversionError`. Which converter each built-in type
uses is :data:`BUILTIN_CONVERTERS`; which value kind each one produces, for the native encoder,
is :data:`CONVERTER_KINDS`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

import orjson

from connectors.postgres.types.kinds import TypeKind

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


def identity(text: str) -> str:
    """The converter of types sent as they are: the text itself (the registry's default)."""
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


BUILTIN_CONVERTERS: Final[Mapping[int, Converter]] = {
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
"""The converter of each built-in type OID that is not sent as it is."""

CONVERTER_KINDS: Final[Mapping[Converter, TypeKind]] = {
    identity: TypeKind.TEXT,
    int: TypeKind.INT,
    _bool: TypeKind.BOOL,
    _timestamptz: TypeKind.TIMESTAMPTZ,
    _timestamp: TypeKind.TIMESTAMP,
    _date: TypeKind.DATE,
    _time: TypeKind.TIME,
}
"""The kind of value each converter above produces; any other converter is
:attr:`TypeKind.PYTHON` (see :func:`converter_kind`)."""


def converter_kind(convert: Converter) -> TypeKind:
    """The kind of value ``convert`` produces: what the native encoder may write itself."""
    return CONVERTER_KINDS.get(convert, TypeKind.PYTHON)
