"""BSON documents as the text Debezium's MongoDB connector writes, character for character.

Debezium 3.x writes ``before``/``after`` with the Java driver's ``BsonDocument.toJson`` in the
legacy ``STRICT`` mode with "compact" settings (indentation on, but empty indent and newline
strings), the key's ``id`` in ``RELAXED`` mode with the same settings, and
``updateDescription.updatedFields`` with the driver's default settings (``RELAXED``, no
indentation). The three differ only in separators and in how a few types are written:

=============  =======================================  =======================================
type           STRICT (``after``)                       RELAXED (key ``id``, ``updatedFields``)
=============  =======================================  =======================================
int64          ``{"$numberLong": "5"}``                 ``5``
double         ``1.5``, ``1.0E-7``, ``NaN`` (bare)      ``1.5``, ``{"$numberDouble": "NaN"}``
date           ``{"$date": 1704164645123}``             ``{"$date": "2024-01-02T03:04:05.123Z"}``
binary         ``{"$binary": "AP8=","$type": "00"}``    ``{"$binary": {"base64": ...}}``
regex          ``{"$regex": "^a","$options": "i"}``     ``{"$regularExpression": {...}}``
=============  =======================================  =======================================

Compact output separates members with ``,`` and writes ``"name": value``; the default settings
separate with ``, ``. Strings are escaped as the driver does: ``"``, ``\\`` and the short
escapes, and ``\\uXXXX`` (lower-case hex, UTF-16 code units) for every character outside the
letter, digit, punctuation, symbol and space-separator categories: control and format
characters, combining marks, modifier letters, line/paragraph separators, private-use,
unassigned and non-BMP characters (as surrogate pairs).

Doubles follow Java's ``Double.toString`` of JDK 19 and later (the shortest digits that read
back as the same double; JDK 17 writes a longer form for a few values such as ``1e23``).
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import re
import struct
import unicodedata
from collections.abc import Callable, Mapping
from decimal import Decimal
from functools import lru_cache
from typing import Any, Final

from bson.binary import Binary
from bson.code import Code
from bson.datetime_ms import DatetimeMS
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MAX_ISO_MS: Final = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
# Java's Character types written as they are; every other character is \u-escaped.
_PLAIN: Final = frozenset(
    [
        "Lu",
        "Ll",
        "Lt",
        "Lo",
        "Nd",
        "Nl",
        "No",
        "Zs",
        "Pc",
        "Pd",
        "Ps",
        "Pe",
        "Pi",
        "Pf",
        "Po",
        "Sm",
        "Sc",
        "Sk",
        "So",
    ]
)
_SHORT: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_ASCII_ESCAPE: Final = re.compile(r'[\x00-\x1f"\\\x7f]')
_REGEX_FLAGS: Final = ((re.I, "i"), (re.L, "l"), (re.M, "m"), (re.S, "s"), (re.U, "u"), (re.X, "x"))


@lru_cache(maxsize=4096)
def _char(c: str) -> str:
    short = _SHORT.get(c)
    if short is not None:
        return short
    code = ord(c)
    if code > 0xFFFF:  # two UTF-16 surrogates, both outside the plain categories
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    if unicodedata.category(c) in _PLAIN:
        return c
    return f"\\u{code:04x}"


def _ascii(match: re.Match[str]) -> str:
    return _char(match.group())


def string(value: str) -> str:
    """A JSON string as the Java driver writes it."""
    if value.isascii():
        return f'"{_ASCII_ESCAPE.sub(_ascii, value)}"'
    return '"' + "".join([_char(c) for c in value]) + '"'


def java_double(value: float) -> str:
    """Java's ``Double.toString`` (JDK 19+): NaN and the infinities bare, as Java writes them."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple))
    stripped = digits.rstrip("0")
    exponent = int(exponent) + len(digits) - len(stripped)
    digits = stripped
    leading = exponent + len(digits) - 1  # the power of ten of the first digit
    prefix = "-" if sign else ""
    if -3 <= leading < 7:
        point = len(digits) + exponent
        if exponent >= 0:
            return f"{prefix}{digits}{'0' * exponent}.0"
        if point > 0:
            return f"{prefix}{digits[:point]}.{digits[point:]}"
        return f"{prefix}0.{'0' * -point}{digits}"
    return f"{prefix}{digits[0]}.{digits[1:] or '0'}E{leading}"


_COMBINATION: Final = 0x3 << 61


def decimal128(value: Decimal128) -> str:
    """``str(Decimal128)`` without its bit-by-bit loop (the same digits)."""
    low, high = struct.unpack("<QQ", value.bid)
    if high & _COMBINATION == _COMBINATION:
        return str(value)
    exponent = ((high >> 49) & 0x3FFF) - 6176
    coefficient = ((high & 0x1FFFFFFFFFFFF) << 64) | low
    return str(Decimal(f"{'-' if high >> 63 else ''}{coefficient}E{exponent}"))


def _millis(value: dt.datetime | DatetimeMS) -> int:
    if isinstance(value, DatetimeMS):
        return int(value)
    aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    delta = aware - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def iso_millis(millis: int) -> str:
    """Java's relaxed ``$date`` text: ISO-8601 UTC, the fraction without trailing zeros."""
    moment = _EPOCH + dt.timedelta(milliseconds=millis)
    fraction = f".{millis % 1000:03d}".rstrip("0") if millis % 1000 else ""
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}{fraction}Z"


def _regex_options(value: Regex[Any]) -> str:
    flags = value.flags
    if isinstance(flags, str):
        return "".join(sorted(flags))
    return "".join(sorted(letter for bit, letter in _REGEX_FLAGS if flags & bit))


class Writer:
    """One of the driver's output forms (see the module docstring).

    Args:
        strict: ``STRICT`` mode (``after``, ``before``); else ``RELAXED``.
        separator: between members and array items: ``","`` (compact) or ``", "`` (default).
    """

    def __init__(self, strict: bool, separator: str) -> None:
        self._strict = strict
        self._sep = separator
        self._types: dict[type, Callable[[Any], str]] = {
            str: string,
            bool: lambda v: "true" if v else "false",
            int: str,
            type(None): lambda v: "null",
            Int64: (lambda v: f'{{"$numberLong": "{int(v)}"}}') if strict else str,
            float: self._double,
            ObjectId: lambda v: f'{{"$oid": "{v}"}}',
            Decimal128: lambda v: f'{{"$numberDecimal": "{decimal128(v)}"}}',
            dt.datetime: self._date,
            DatetimeMS: self._date,
            Binary: self._binary,
            bytes: self._binary,
            Timestamp: lambda v: f'{{"$timestamp": {{"t": {v.time}{self._sep}"i": {v.inc}}}}}',
            Regex: self._regex,
            MinKey: lambda v: '{"$minKey": 1}',
            MaxKey: lambda v: '{"$maxKey": 1}',
            Code: self._code,
            DBRef: lambda v: self.document(v.as_doc()),
        }

    def value(self, value: Any) -> str:
        """One BSON value, as pymongo decodes it."""
        writer = self._types.get(type(value))
        if writer is not None:
            return writer(value)
        if isinstance(value, Mapping):
            return self.document(value)
        if isinstance(value, list | tuple):
            return "[" + self._sep.join([self.value(v) for v in value]) + "]"
        for kind, fallback in self._types.items():  # subclasses (SON is a Mapping already)
            if isinstance(value, kind):
                return fallback(value)
        raise TypeError(f"cannot write {type(value).__name__} as Extended JSON")

    def document(self, doc: Mapping[str, Any]) -> str:
        """A document, its members in order."""
        value = self.value
        return "{" + self._sep.join([f"{string(str(k))}: {value(v)}" for k, v in doc.items()]) + "}"

    def _double(self, value: float) -> str:
        if self._strict or math.isfinite(value):
            return java_double(value)
        return f'{{"$numberDouble": "{java_double(value)}"}}'

    def _date(self, value: dt.datetime | DatetimeMS) -> str:
        millis = _millis(value)
        if self._strict:
            return f'{{"$date": {millis}}}'
        if 0 <= millis <= _MAX_ISO_MS:
            return f'{{"$date": "{iso_millis(millis)}"}}'
        return f'{{"$date": {{"$numberLong": "{millis}"}}}}'

    def _binary(self, value: bytes) -> str:
        subtype = value.subtype if isinstance(value, Binary) else 0
        data = base64.b64encode(value).decode()
        if self._strict:
            return f'{{"$binary": "{data}"{self._sep}"$type": "{subtype:02x}"}}'
        return f'{{"$binary": {{"base64": "{data}"{self._sep}"subType": "{subtype:02x}"}}}}'

    def _regex(self, value: Regex[Any]) -> str:
        pattern, options = string(value.pattern), string(_regex_options(value))
        if self._strict:
            return f'{{"$regex": {pattern}{self._sep}"$options": {options}}}'
        return f'{{"$regularExpression": {{"pattern": {pattern}{self._sep}"options": {options}}}}}'

    def _code(self, value: Code) -> str:
        if value.scope is None:
            return f'{{"$code": {string(str(value))}}}'
        return f'{{"$code": {string(str(value))}{self._sep}"$scope": {self.document(value.scope)}}}'


STRICT: Final = Writer(strict=True, separator=",")
"""``after``/``before``: ``JsonSerialization.COMPACT_JSON_SETTINGS``."""
RELAXED_COMPACT: Final = Writer(strict=False, separator=",")
"""The key's ``id``: ``RELAXED`` with the compact settings."""
RELAXED_DEFAULT: Final = Writer(strict=False, separator=", ")
"""``updateDescription.updatedFields``: ``BsonDocument.toJson()``."""


def document_text(doc: Mapping[str, Any]) -> str:
    """``after``/``before`` of a document."""
    return STRICT.document(doc)


def id_text(value: Any) -> str:
    """The key's ``id``: the ``_id`` value in relaxed Extended JSON (a string ``_id`` keeps its
    quotes: ``"\\"s1\\""``)."""
    return RELAXED_COMPACT.value(value)


def updated_fields_text(fields: Mapping[str, Any]) -> str:
    """``updateDescription.updatedFields``."""
    return RELAXED_DEFAULT.document(fields)
