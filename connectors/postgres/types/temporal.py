"""Dates, times, timestamps and intervals as Debezium writes them, per ``time.precision.mode``
and ``interval.handling.mode``.

Each public ``*_converter`` returns the ``str -> value`` function of one column (chosen once,
by the column's precision and the options); the value functions parse PostgreSQL's ISO text
(``DateStyle=ISO``, ``IntervalStyle=postgres``, ``TimeZone=UTC``: see
:data:`~connectors.postgres.types.scalars.TEXT_FORMAT_SETTINGS`).

The special values are what Debezium 3.6.1's streaming writes (``tests/debezium/OBSERVED.md``,
compared live by the differential test): a BC year is the proleptic year ``1 - year``
(``0044-03-15 BC`` is ``-0043-03-15``); ``date`` ``infinity``/``-infinity`` are its sentinel
days ``-5877611-06-21``/``-5877611-06-22``; ``timestamp`` ``infinity``/``-infinity`` are
pgjdbc's sentinels read as µs (``+294247-01-10T04:00:25.2``/``-290308-12-21T19:59:27.6``);
``timestamptz`` ``infinity`` keeps its text. ISO years get Java's form: ``+`` past 9999, a
``-`` and four digits below 0.
"""

from __future__ import annotations

import re
from typing import Final

from connectors.postgres.types.scalars import Converter

__all__ = [
    "TIMESTAMPTZ_BY_PRECISION",
    "date_converter",
    "interval_converter",
    "time_converter",
    "timestamp_converter",
    "timestamptz",
    "timestamptz_converter",
    "timetz",
]

_DAY_US: Final = 86_400_000_000
_MONTH_US: Final = 2_629_800_000_000  # Debezium's month: 30.4375 days
_SPECIALS: Final = frozenset({"infinity", "-infinity"})
#: Debezium's POSITIVE/NEGATIVE_INFINITY_LOCAL_DATE (-5877611-06-21, -22) as epoch days.
_INFINITY_DAYS: Final = {"infinity": -2_147_472_692, "-infinity": -2_147_472_691}
#: pgjdbc's DATE_POSITIVE/NEGATIVE_INFINITY, which Debezium takes for µs since the epoch.
_INFINITY_US: Final = {
    "infinity": 9_223_372_036_825_200_000,
    "-infinity": -9_223_372_036_832_400_000,
}
_BC: Final = " BC"


def _epoch_day(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year; Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468


def _ymd(text: str) -> tuple[int, int, int]:
    """The proleptic year (1 BC is 0), month and day of ``YYYY-MM-DD[ BC]``."""
    bc = text.endswith(_BC)
    year, month, day = (text[:-3] if bc else text).split("-")
    if len(month) != 2 or len(day) != 2 or len(year) < 4:
        raise ValueError("not an ISO date (is DateStyle ISO?)")
    return (1 - int(year) if bc else int(year)), int(month), int(day)


def _day(text: str) -> int:
    """Epoch days of ``YYYY-MM-DD[ BC]`` (a year of 4 or more digits)."""
    return _epoch_day(*_ymd(text))


def _date_days(text: str) -> int:
    """``date`` as epoch days, ``infinity`` and ``-infinity`` as Debezium's sentinel days."""
    special = _INFINITY_DAYS.get(text)
    return _day(text) if special is None else special


def _clock_us(text: str) -> int:
    """Microseconds since midnight of ``HH:MM:SS[.ffffff]``."""
    if len(text) < 8 or text[2] != ":" or text[5] != ":" or (len(text) > 8 and text[8] != "."):
        raise ValueError("not an ISO time (is DateStyle ISO?)")
    micros = int(text[9:].ljust(6, "0")) if len(text) > 9 else 0
    if micros >= 1_000_000:
        raise ValueError("more than 6 fraction digits")
    return (int(text[:2]) * 3600 + int(text[3:5]) * 60 + int(text[6:8])) * 1_000_000 + micros


def _split_stamp(text: str) -> tuple[str, str]:
    """The date (with its era, ``YYYY-MM-DD[ BC]``) and the clock of a timestamp's text."""
    bc = text.endswith(_BC)
    day, _, clock = (text[:-3] if bc else text).partition(" ")
    return (day + _BC if bc else day), clock


def _stamp_us(text: str) -> int:
    """µs since the epoch of ``timestamp`` text; the infinities as Debezium's sentinels."""
    special = _INFINITY_US.get(text)
    if special is not None:
        return special
    day, clock = _split_stamp(text)
    return _day(day) * _DAY_US + _clock_us(clock)


def _keep_special(convert: Converter) -> Converter:
    """``convert``, but ``infinity`` and ``-infinity`` keep their text (``interval``)."""

    def guarded(text: str) -> object:
        if text in _SPECIALS:
            return text
        return convert(text)

    return guarded


def date_converter(mode: str) -> Converter:
    """``date``: epoch days, or ``'2024-02-29Z'`` under ``isostring``."""
    if mode == "isostring":
        return iso_date
    return _date_days


def _java_date(year: int, month: int, day: int) -> str:
    """Java's ISO date: a year past 9999 gets a ``+`` (``'+12345-06-07'``), one below 0 a
    ``-`` and at least four digits (``'-0043-03-15'``)."""
    if year > 9999:
        head = f"+{year}"
    elif year < 0:
        head = f"-{-year:04d}"
    else:
        head = f"{year:04d}"
    return f"{head}-{month:02d}-{day:02d}"


def _java_year(day: str) -> str:
    """The ISO date of ``YYYY-MM-DD[ BC]`` text in Java's form (see :func:`_java_date`)."""
    return _java_date(*_ymd(day))


def iso_date(text: str) -> str:
    """``date`` under ``isostring``: the ISO date with ``Z``."""
    if len(text) == 10 and text[4] == "-" and text[7] == "-":
        return text + "Z"
    special = _INFINITY_DAYS.get(text)
    if special is not None:
        return _java_date(*_civil(special)) + "Z"
    return _java_year(text) + "Z"


def time_converter(mode: str, precision: int) -> Converter:
    """``time(p)``: µs, ms (``adaptive`` for p <= 3, ``connect``: truncated), or ISO + ``Z``."""
    if mode == "isostring":
        return iso_time
    if mode == "connect" or (mode == "adaptive" and 0 <= precision <= 3):
        return _time_ms
    return _clock_us


def _time_ms(text: str) -> int:
    return _clock_us(text) // 1000


def iso_time(text: str) -> str:
    """``time`` under ``isostring``: the server's text (fraction trimmed) with ``Z``."""
    _clock_us(text)
    return text + "Z"


def timestamp_converter(mode: str, precision: int) -> Converter:
    """``timestamp(p)``: µs, ms (p <= 3, or ``connect``: floored), or ISO + ``Z``."""
    if mode == "isostring":
        return iso_timestamp
    if mode == "connect" or 0 <= precision <= 3:
        return _stamp_ms
    return _stamp_us


def _stamp_ms(text: str) -> int:
    return _stamp_us(text) // 1000


def iso_timestamp(text: str) -> str:
    """``timestamp`` under ``isostring``: ``'2024-02-29T13:45:30.5Z'``."""
    if text in _INFINITY_US:
        days, clock_us = divmod(_INFINITY_US[text], _DAY_US)
        return f"{_java_date(*_civil(days))}T{_clock_text(clock_us)}Z"
    day, clock = _split_stamp(text)
    _clock_us(clock)
    return f"{_java_year(day)}T{clock}Z"


_OFFSET: Final = re.compile(r"([+-])(\d{2})(?::(\d{2}))?(?::(\d{2}))?")


def _offset_split(text: str) -> tuple[str, int]:
    """The local part and the UTC offset in seconds of a value ending in ``+HH[:MM[:SS]]``."""
    cut = max(text.rfind("+"), text.rfind("-"))
    match = _OFFSET.fullmatch(text, cut) if cut > 0 else None
    if match is None:
        raise ValueError("no UTC offset")
    sign, hours, minutes, seconds = match.groups()
    offset = int(hours) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    return text[:cut], offset if sign == "+" else -offset


def _clock_text(micros: int) -> str:
    """``HH:MM:SS`` and the fraction, trimmed."""
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{text}.{fraction:06d}".rstrip("0") if fraction else text


def timetz(text: str) -> str:
    """``timetz`` in every mode: UTC, fraction trimmed, ``Z`` (``'13:45:30.5+02'`` ->
    ``'11:45:30.5Z'``)."""
    clock, offset = _offset_split(text)
    return _clock_text((_clock_us(clock) - offset * 1_000_000) % _DAY_US) + "Z"


def _timestamptz(text: str, width: int) -> str:
    """``timestamptz`` as Debezium's ``ZonedTimestamp``: UTC, ``width`` fraction digits (the
    column's declared precision: ``timestamptz(3)`` ``.999``, ``timestamptz(0)`` none), ``Z``.

    The server rounds a value to its column's precision, so the text never holds more digits.
    """
    if text[-3:] == "+00" and len(text) >= 22 and text[10] == " ":
        clock = text[11:-3]
        _clock_us(clock)
        fraction = clock[9:] if len(clock) > 8 else ""
        return f"{text[:10]}T{clock[:8]}{_fraction(fraction, width)}Z"
    if text in _SPECIALS:
        return text
    bc = text.endswith(_BC)
    local, offset = _offset_split(text[:-3] if bc else text)
    day, clock = _split_stamp(local)
    micros = _day(day + _BC if bc else day) * _DAY_US + _clock_us(clock) - offset * 1_000_000
    days, clock_us = divmod(micros, _DAY_US)
    seconds = _clock_text(clock_us - clock_us % 1_000_000)
    digits = f"{clock_us % 1_000_000:06d}".rstrip("0")
    return f"{_java_date(*_civil(days))}T{seconds}{_fraction(digits, width)}Z"


def _fraction(digits: str, width: int) -> str:
    """``.`` and ``digits`` padded to ``width`` (nothing for ``timestamptz(0)``)."""
    return f".{digits:0<{width}}" if width or digits else ""


def timestamptz(text: str) -> str:
    """``timestamptz`` without a declared precision, in every mode: UTC, six fraction digits,
    ``Z``."""
    return _timestamptz(text, 6)


def _timestamptz_width(width: int) -> Converter:
    def convert(text: str) -> str:
        return _timestamptz(text, width)

    return convert


#: ``timestamptz(p)``'s converters by ``p``; one function per precision, so the native row
#: encoder can tell them apart (``modes.CONVERTER_KINDS``).
TIMESTAMPTZ_BY_PRECISION: Final[dict[int, Converter]] = {
    width: timestamptz if width == 6 else _timestamptz_width(width) for width in range(7)
}


def timestamptz_converter(precision: int) -> Converter:
    """``timestamptz(p)`` in every mode: the fraction has ``p`` digits, 6 without a ``p``
    (Debezium pads ``ZonedTimestamp`` to the column's precision: ``timestamptz(1)``
    ``10:00:00.1Z``, ``timestamptz(0)`` ``09:59:59Z``)."""
    return TIMESTAMPTZ_BY_PRECISION[precision if 0 <= precision <= 6 else 6]


def _civil(days: int) -> tuple[int, int, int]:
    """The proleptic year, month and day of epoch days (the inverse of :func:`_epoch_day`)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    return year, month, day


_INTERVAL: Final = re.compile(
    r"(?:([+-]?\d+) years? ?)?(?:([+-]?\d+) mons? ?)?(?:([+-]?\d+) days? ?)?"
    r"(?:([+-])?(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?"
)


def _interval_parts(text: str) -> tuple[int, int, int, int, int, int, int]:
    """Years, months, days, hours, minutes, seconds, µs of IntervalStyle ``postgres`` text;
    the time's sign is on each of its parts, as PostgreSQL's JDBC driver reads it."""
    match = _INTERVAL.fullmatch(text)
    if match is None or not text:
        raise ValueError("not an interval in IntervalStyle postgres")
    years, months, days, sign, hours, minutes, seconds, fraction = match.groups()
    factor = -1 if sign == "-" else 1
    micros = int((fraction or "").ljust(6, "0"))
    return (
        int(years or 0),
        int(months or 0),
        int(days or 0),
        factor * int(hours or 0),
        factor * int(minutes or 0),
        factor * int(seconds or 0),
        factor * micros,
    )


def interval_micros(text: str) -> int:
    """``interval`` under ``numeric``: µs, a month being 30.4375 days (Debezium's
    ``MicroDuration``)."""
    years, months, days, hours, minutes, seconds, micros = _interval_parts(text)
    clock = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros
    return (years * 12 + months) * _MONTH_US + days * _DAY_US + clock


def interval_string(text: str) -> str:
    """``interval`` under ``string``: every part, each with its sign (``'P0Y0M-1DT0H0M-1S'``,
    zero ``'P0Y0M0DT0H0M0S'``), the seconds' fraction trimmed."""
    years, months, days, hours, minutes, seconds, micros = _interval_parts(text)
    total = seconds * 1_000_000 + micros
    whole, fraction = divmod(abs(total), 1_000_000)
    second_text = ("-" if total < 0 else "") + str(whole)
    if fraction:
        second_text += f".{fraction:06d}".rstrip("0")
    return f"P{years}Y{months}M{days}DT{hours}H{minutes}M{second_text}S"


def interval_converter(mode: str) -> Converter:
    """``interval``: µs (``numeric``) or the ISO-8601 string (``string``); PostgreSQL 17's
    ``infinity`` keeps its text."""
    return _keep_special(interval_micros if mode == "numeric" else interval_string)
