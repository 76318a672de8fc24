"""Record values back to what they mean, under any envelope encoding.

A value as the envelope carries it (``"HL6ZGhQ="``, ``19782``, ``"P0Y0M-1DT0H0M-1S"``), its
column's PostgreSQL type name (:attr:`cdc.contracts.schema.Column.type`, e.g. ``numeric(12,2)``) and
the pipeline's :class:`~cdc.envelope.options.EnvelopeOptions` give one canonical Python value, the
same whichever options wrote it: ``Decimal``, ``date``, ``time``, ``datetime`` (aware, UTC, for
``timestamptz``), :class:`Interval`, ``bytes``, ``float``, and the JSON text of ``json``/``jsonb``.
Sinks store what it means; ``cdc verify`` compares it.

``options=None`` is the encoding of a log written before the ``envelope:`` block (stored as
``legacy``): ISO strings without ``Z``, decimal strings with ``"NaN"``, nested JSON documents.

:func:`decoder` is chosen once per column (the hot path calls the function it returns); each
handles ``None`` (SQL NULL) and passes through values already in canonical form, so a value
decoded twice stays the same.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import orjson

from cdc.envelope.options import EnvelopeOptions

Decoder = Callable[[Any], Any]

EPOCH: Final = dt.date(1970, 1, 1)
EPOCH_DT: Final = dt.datetime(1970, 1, 1)
UTC: Final = dt.UTC
_DAY_US: Final = 86_400_000_000


@dataclass(frozen=True, slots=True)
class Interval:
    """A PostgreSQL interval: months, days and microseconds, kept apart as PostgreSQL keeps them.

    Under ``interval.handling.mode: numeric`` Debezium folds the three into microseconds (a
    month as 30.4375 days), so such a value decodes to ``Interval(0, 0, µs)``.
    """

    months: int = 0
    days: int = 0
    microseconds: int = 0


def normalize_type(type_name: str) -> str:
    """Lower-case, single-spaced, without the quotes ``format_type`` puts on some names."""
    return " ".join(type_name.strip().lower().replace('"', "").split())


def decode(value: Any, type_name: str, options: EnvelopeOptions | None) -> Any:
    """One value (see the module docstring); prefer :func:`decoder` on a hot path."""
    return decoder(type_name, options)(value)


def decoder(type_name: str, options: EnvelopeOptions | None) -> Decoder:
    """The function from an envelope value of a ``type_name`` column to its canonical value."""
    name = normalize_type(type_name)
    if name.endswith("[]"):
        element = decoder(name[:-2], options)
        return _array(element)
    for pattern, build in _BUILDERS:
        match = pattern.fullmatch(name)
        if match is not None:
            return build(match, options)
    return _identity


def _array(element: Decoder) -> Decoder:
    def run(value: Any) -> Any:
        if isinstance(value, list):
            return [run(v) if isinstance(v, list) else element(v) for v in value]
        return element(value)

    return run


def _identity(value: Any) -> Any:
    return value


def _nullable(convert: Decoder) -> Decoder:
    def run(value: Any) -> Any:
        return None if value is None else convert(value)

    return run


# -- numbers -------------------------------------------------------------------------------------


def _numeric(match: re.Match[str], options: EnvelopeOptions | None) -> Decoder:
    scale = None if match.group(1) is None else int(match.group(2) or 0)
    precise = options is not None and options.decimal_handling_mode == "precise"
    return _nullable(lambda value: numeric_value(value, scale, precise))


#: The special values' names in every decimal mode: ``string`` writes Debezium's
#: ``NAN``/``POSITIVE_INFINITY``/``NEGATIVE_INFINITY``, ``double`` ``NaN``/``Infinity``.
_NAN_TEXT: Final = {
    "nan": Decimal("NaN"),
    "infinity": Decimal("Infinity"),
    "positive_infinity": Decimal("Infinity"),
    "negative_infinity": Decimal("-Infinity"),
}


def numeric_value(value: Any, scale: int | None, precise: bool = False) -> Decimal:
    """A numeric in any of Debezium's decimal forms, with ``scale`` from the column's type.

    ``precise``: base64 of the unscaled big-endian two's complement (scale from the type) or
    ``{"scale", "value"}`` (``VariableScaleDecimal``, for ``numeric`` without a typmod);
    ``string``: the exact text (``"NAN"``, ``"POSITIVE_INFINITY"``); ``double``: a JSON
    number, or ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
    """
    if isinstance(value, Decimal):
        return value
    if isinstance(value, dict):
        return _unscaled(value["value"], int(value["scale"]))
    if isinstance(value, bool):
        raise ValueError(f"not a numeric: {value!r}")
    if isinstance(value, int | float):
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        return _rescale(number, scale)
    text = str(value)
    if precise:
        return _unscaled(text, scale or 0)
    special = _NAN_TEXT.get(text.lower().lstrip("+-"))
    if special is not None:
        return -special if text.startswith("-") else special
    return Decimal(text)


def _unscaled(encoded: str, scale: int) -> Decimal:
    unscaled = int.from_bytes(base64.b64decode(encoded), "big", signed=True)
    return Decimal(unscaled).scaleb(-scale)


def _rescale(number: Decimal, scale: int | None) -> Decimal:
    # A double loses the scale ("0.1" for 0.10): the column's type gives it back.
    if scale is None or not number.is_finite():
        return number
    return number.quantize(Decimal(1).scaleb(-scale))


_FLOAT_TEXT: Final = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _money(match: re.Match[str], options: EnvelopeOptions | None) -> Decoder:
    # Debezium writes money as a numeric of scale 2 (its money.fraction.digits).
    precise = options is not None and options.decimal_handling_mode == "precise"
    return _nullable(lambda value: numeric_value(value, 2, precise))


def _float(match: re.Match[str], options: EnvelopeOptions | None) -> Decoder:
    return _nullable(lambda v: _FLOAT_TEXT[v] if isinstance(v, str) else float(v))


# -- bytes and documents -------------------------------------------------------------------------


def _bytea(match: re.Match[str], options: EnvelopeOptions | None) -> Decoder:
    mode = "base64" if options is None else options.binary_handling_mode
    if mode == "hex":
        return _nullable(lambda v: v if isinstance(v, bytes) else bytes.fromhex(v))
    if mode == "base64-url-safe":
        return _nullable(lambda v: v if isinstance(v, bytes) else base64.urlsafe_b64decode(v))
    return _nullable(lambda v: v if isinstance(v, bytes) else base64.b64decode(v))


def _json(match: re.Match[str], options: EnvelopeOptions | None) -> Decoder:
    if options is None:  # the legacy encoding nested the document
        return _nullable(lambda v: orjson.dumps(v).decode())
    return _nullable(lambda v: v if isinstance(v, str) else orjson.dumps(v).decode())


# -- time ----------------------------------------------------------------------------------------


def _precision(text: str | None) -> int:
    return 6 if text is None else int(text)


def _date(match: re.Match[str], options: EnvelopeOptions | None) -> Decoder:
    return _nullable(date_value)


def date_value(value: Any) -> dt.date | str:
    """Epoch days (every numeric mode) or ISO text (``2024-02-29Z``; legacy without ``Z``).

    A date Python's ``date`` cannot hold is PostgreSQL's text (:func:`far_text`).
    """
    if isinstance(value, dt.date):
        return value
    if isinstance(value, int):
        try:
            return EPOCH + dt.timedelta(days=value)
        except OverflowError:
            return far_text(value * _DAY_US, clock=False)
    try:
        return dt.date.fromisoformat(value.removesuffix("Z"))
    except ValueError:
        return far_iso(str(value))


# -- what Python's date and datetime cannot hold --------------------------------------------------

#: Debezium's sentinels for PostgreSQL's infinities, as µs since the epoch or ISO text (what its
#: streaming writes, and so ours): dates -5877611-06-21/-22, timestamps pgjdbc's constants.
_INFINITE: Final[dict[int | str, str]] = {
    -2_147_472_692 * _DAY_US: "infinity",
    -2_147_472_691 * _DAY_US: "-infinity",
    9_223_372_036_825_200_000: "infinity",
    -9_223_372_036_832_400_000: "-infinity",
    "-5877611-06-21": "infinity",
    "-5877611-06-22": "-infinity",
    "+294247-01-10T04:00:25.2": "infinity",
    "-290308-12-21T19:59:27.6": "-infinity",
}
_FAR_ISO: Final = re.compile(r"([+-]\d{4,}|0000)-(\d\d)-(\d\d)(?:T(\d\d:\d\d:\d\d(?:\.\d+)?))?")
_CYCLE_DAYS, _CYCLE_YEARS = 146_097, 400  # the Gregorian calendar repeats every 400 years


def _sql_date_text(year: int, month: int, day: int, clock: str | None, zone: str) -> str:
    """PostgreSQL's text of a date or timestamp: ``0044-03-15 BC``, ``12345-01-01 00:00:00``."""
    era = ""
    if year <= 0:
        year, era = 1 - year, " BC"
    text = f"{year:04d}-{month:02d}-{day:02d}"
    if clock is not None:
        trimmed = clock.rstrip("0").rstrip(".") if "." in clock else clock
        text += f" {trimmed}{zone}"
    return text + era


def far_text(micros: int, clock: bool = True, zone: str = "") -> str:
    """µs since the epoch past Python's years: ``infinity``, ``-infinity`` (Debezium's
    sentinels), else PostgreSQL's text (``0044-03-15 12:00:00 BC``)."""
    if micros in _INFINITE:
        return _INFINITE[micros]
    days, clock_us = divmod(micros, _DAY_US)
    cycles = -days // _CYCLE_DAYS + 1 if days < 0 else -(days // _CYCLE_DAYS)
    shifted = EPOCH + dt.timedelta(days=days + cycles * _CYCLE_DAYS)
    text = (EPOCH_DT + dt.timedelta(microseconds=clock_us)).time().isoformat()
    year = shifted.year - cycles * _CYCLE_YEARS
    return _sql_date_text(year, shifted.month, shifted.day, text if clock else None, zone)


def far_iso(text: str, zone: str = "") -> str:
    """ISO text past Python's years: the infinities' sentinels, BC (``-0043-03-15``, year 0
    is 1 BC) and years past 9999 (Java's ``+12345-01-01``) as PostgreSQL's text, as the epoch
    numbers of the other modes decode (:func:`far_text`); any other text as it is."""
    bare = text.removesuffix("Z")
    if bare in _INFINITE:
        return _INFINITE[bare]
    match = _FAR_ISO.fullmatch(bare)
    if match is None:
        return text
    year, month, day, clock = match.groups()
    return _sql_date_text(int(year), int(month), int(day), clock, zone)


_TEMPORAL: Final = re.compile(
    r"(time|timestamp)(?:\((\d+)\))?(?: (with|without) time zone)?"
    r"|(timetz|timestamptz)(?:\((\d+)\))?"
)


def _temporal(match: re.Match[str], options: EnvelopeOptions | None) -> Decoder:
    base, precision, zone, short, short_precision = match.groups()
    zoned = zone == "with" or short is not None
    digits = _precision(precision or short_precision)
    if (base or short).startswith("timestamp"):
        if zoned:
            return _nullable(timestamptz_value)
        stamp_unit = _timestamp_unit(options, digits)
        return _nullable(lambda v: timestamp_value(v, stamp_unit))
    if zoned:
        return _nullable(timetz_value)
    unit = _time_unit(options, digits)
    return _nullable(lambda v: time_value(v, unit))


def _time_unit(options: EnvelopeOptions | None, precision: int) -> int:
    """Microseconds per integer unit of a ``time`` value under ``options``."""
    mode = "isostring" if options is None else options.time_precision_mode
    if mode == "connect" or (mode == "adaptive" and precision <= 3):
        return 1000
    return 1


END_OF_DAY: Final = "24:00:00"  # PostgreSQL's time holds it, Python's does not
_END_OF_DAY_ISO: Final = re.compile(r"24:00:00(?:\.0+)?")


def time_value(value: Any, unit: int) -> dt.time | str:
    """µs or ms since midnight, or ISO text (``13:45:30.123456Z``). ``24:00:00`` is the text
    :data:`END_OF_DAY` in every form (a day of µs or ms, ``"24:00:00Z"``: the ``Z`` is the
    encoding's, not the value's)."""
    if isinstance(value, dt.time):
        return value
    if isinstance(value, int):
        micros = value * unit
        if micros >= _DAY_US:
            return END_OF_DAY
        return (EPOCH_DT + dt.timedelta(microseconds=micros)).time()
    bare = value.removesuffix("Z")
    try:
        return dt.time.fromisoformat(_fraction(bare))
    except ValueError:
        return END_OF_DAY if _END_OF_DAY_ISO.fullmatch(bare) else str(value)


def timetz_value(value: Any) -> dt.time | str:
    """``11:45:30.5Z`` (Debezium: UTC in every mode); a legacy offset is moved to UTC."""
    if isinstance(value, dt.time):
        return value
    try:
        parsed = dt.time.fromisoformat(_fraction(value))
    except ValueError:
        return str(value)
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    moved = dt.datetime.combine(dt.date(2000, 1, 3), parsed).astimezone(UTC)
    return moved.timetz()


_FRACTION: Final = re.compile(r"(\d\d:\d\d:\d\d)\.(\d{1,6})")


def _fraction(text: str) -> str:
    # Python 3.11's fromisoformat wants 3 or 6 fraction digits; Debezium trims ("30.5").
    return _FRACTION.sub(lambda m: f"{m.group(1)}.{m.group(2).ljust(6, '0')}", text, count=1)


def _timestamp_unit(options: EnvelopeOptions | None, precision: int) -> int:
    """Microseconds per integer unit of a ``timestamp`` value under ``options``."""
    mode = "isostring" if options is None else options.time_precision_mode
    return 1000 if mode == "connect" or precision <= 3 else 1


def timestamp_value(value: Any, unit: int) -> dt.datetime | str:
    """µs or ms since the epoch, or ISO text (``2024-02-29T13:45:30.123456Z``), naive."""
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, int):
        try:
            return EPOCH_DT + dt.timedelta(microseconds=value * unit)
        except OverflowError:
            return far_text(value * unit)
    try:
        return dt.datetime.fromisoformat(_fraction(value.removesuffix("Z")))
    except ValueError:
        return far_iso(str(value))


def timestamptz_value(value: Any) -> dt.datetime | str:
    """ISO text in UTC (``2024-02-29T13:45:30.500000Z``, every mode), aware."""
    if isinstance(value, dt.datetime):
        return value
    try:
        parsed = dt.datetime.fromisoformat(_fraction(value))
    except ValueError:
        return far_iso(str(value), zone="+00")
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


# -- intervals -----------------------------------------------------------------------------------

_ISO_DURATION: Final = re.compile(
    r"(-)?P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)W)?(?:(-?\d+)D)?"
    r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d+)?)S)?)?"
)


def _interval(match: re.Match[str], options: EnvelopeOptions | None) -> Decoder:
    return _nullable(interval_value)


def interval_value(value: Any) -> Interval | str:
    """µs (``numeric``) or ISO-8601 (``P1Y2M3DT4H5M6.789S``, each part with its sign)."""
    if isinstance(value, Interval):
        return value
    if isinstance(value, int | float):
        return Interval(0, 0, int(value))
    match = _ISO_DURATION.fullmatch(value)
    if match is None or value in ("P", "PT"):
        return str(value)
    sign = -1 if match.group(1) else 1
    years, months, weeks, days, hours, minutes = (int(g or 0) for g in match.groups()[1:7])
    seconds = Decimal(match.group(8) or 0)
    micros = int((hours * 3600 + minutes * 60 + seconds) * 1_000_000)
    return Interval(sign * (years * 12 + months), sign * (weeks * 7 + days), sign * micros)


_BUILDERS: Final[list[tuple[re.Pattern[str], Callable[..., Decoder]]]] = [
    (re.compile(r"(?:numeric|decimal)(?:\((\d+)(?:,\s*(-?\d+))?\))?"), _numeric),
    (re.compile(r"money"), _money),
    (re.compile(r"real|float4|double precision|float8|float(?:\(\d+\))?"), _float),
    (re.compile(r"bytea"), _bytea),
    (re.compile(r"jsonb?"), _json),
    (re.compile(r"date"), _date),
    (_TEMPORAL, _temporal),
    (re.compile(r"interval(?: [a-z ]+?)?(?:\(\d+\))?"), _interval),
]
