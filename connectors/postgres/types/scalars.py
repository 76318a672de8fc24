"""The scalar converters: pure ``str -> value`` functions over PostgreSQL's text output forms.

They raise ``ValueError`` (or kin, see :data:`~connectors.postgres.types.errors.
CONVERSION_FAILURES`) on bad input; the registry and the row converter translate that into a
:class:`~connectors.postgres.types.errors.ConversionError`. Which converter each built-in type
uses in every envelope mode is :data:`BUILTIN_CONVERTERS` (:mod:`.modes` chooses those that
depend on the options); which value kind each produces, for the native encoder, is
:data:`~connectors.postgres.types.modes.CONVERTER_KINDS`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final

import orjson

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


def bytea_bytes(text: str) -> bytes:
    """The bytes of ``bytea`` text (``bytea_output`` hex, or escape)."""
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    # bytea_output=escape: printable ASCII, '\\' and '\ooo' octal escapes
    if "\\" in _BYTEA_ESCAPE.sub("", text):
        raise ValueError("invalid bytea escape")
    return _BYTEA_ESCAPE.sub(_unescape_octet, text).encode("latin-1")


def _bytea(text: str) -> str:
    return base64.b64encode(bytea_bytes(text)).decode("ascii")


def _unescape_octet(match: re.Match[str]) -> str:
    code = match.group(1)
    return "\\" if code == "\\" else chr(int(code, 8))


_INFINITIES: Final = frozenset({"infinity", "-infinity"})


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
}
"""The converter of each built-in type OID that is the same in every envelope mode and not
sent as it is; :mod:`.modes` chooses the others by the column and the options."""
