"""Dates, times, timestamps and intervals as Debezium writes them, per ``time.precision.mode``
and ``interval.handling.mode``.

Each public ``*_converter`` returns the ``str -> value`` function of one column (chosen once,
by the column's precision and the options); the value functions parse PostgreSQL's ISO text
(``DateStyle=ISO``, ``IntervalStyle=postgres``, ``TimeZone=UTC``: see
:data:`~connectors.postgres.types.scalars.TEXT_FORMAT_SETTINGS`). ``infinity`` and BC values,
which Debezium writes as clamped or wrong numbers, keep the server's text (not compared with
Debezium); ISO years past 9999 get Java's ``+``.
"""

from __future__ import annotations

import re
from typing import Final

from connectors.postgres.types.scalars import Converter

__all__ = [
    "date_converter",
    "interval_converter",
    "time_converter",
    "timestamp_converter",
    "timestamptz",
    "timetz",
]

_DAY_US: Final = 86_400_000_000
_MONTH_US: Final = 2_629_800_000_000  # Debezium's month: 30.4375 days
_SPECIALS: Final = frozenset({"infinity", "-infinity"})


def _epoch_day(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year; Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468


def _day(text: str) -> int:
    """Epoch days of ``YYYY-MM-DD`` (a year of 4 or more digits)."""
    year, month, day = text.split("-")
    if len(month) != 2 or len(day) != 2 or len(year) < 4:
        raise ValueError("not an ISO date (is DateStyle ISO?)")
    return _epoch_day(int(year), int(month), int(day))


def _clock_us(text: str) -> int:
    """Microseconds since midnight of ``HH:MM:SS[.ffffff]``."""
    if len(text) < 8 or text[2] != ":" or text[5] != ":" or (len(text) > 8 and text[8] != "."):
        raise ValueError("not an ISO time (is DateStyle ISO?)")
    micros = int(text[9:].ljust(6, "0")) if len(text) > 9 else 0
    if micros >= 1_000_000:
        raise ValueError("more than 6 fraction digits")
    return (int(text[:2]) * 3600 + int(text[3:5]) * 60 + int(text[6:8])) * 1_000_000 + micros


def _stamp_us(text: str) -> int:
    day, _, clock = text.partition(" ")
    return _day(day) * _DAY_US + _clock_us(clock)


def _keep_special(convert: Converter) -> Converter:
    """``convert``, but ``infinity`` and BC values keep their text (see the module)."""

    def guarded(text: str) -> object:
        if text in _SPECIALS or text.endswith(" BC"):
            return text
        return convert(text)

    return guarded


def date_converter(mode: str) -> Converter:
    """``date``: epoch days, or ``'2024-02-29Z'`` under ``isostring``."""
    if mode == "isostring":
        return iso_date
    return _keep_special(_day)


def _java_year(day: str) -> str:
    """Java's ISO date: a year past 9999 gets a ``+`` (``'+12345-06-07'``)."""
    return "+" + day if len(day) > 10 else day


def iso_date(text: str) -> str:
    """``date`` under ``isostring``: the ISO date with ``Z``."""
    if len(text) == 10 and text[4] == "-" and text[7] == "-":
        return text + "Z"
    if text in _SPECIALS or text.endswith(" BC"):
        return text
    _day(text)  # raises on a malformed date
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
        return _keep_special(_stamp_ms)
    return _keep_special(_stamp_us)


def _stamp_ms(text: str) -> int:
    return _stamp_us(text) // 1000


def iso_timestamp(text: str) -> str:
    """``timestamp`` under ``isostring``: ``'2024-02-29T13:45:30.5Z'``."""
    if text in _SPECIALS or text.endswith(" BC"):
        return text
    day, _, clock = text.partition(" ")
    _day(day)
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


def _clock_text(micros: int, digits: int | None) -> str:
    """``HH:MM:SS`` and the fraction: ``digits`` of them, or trimmed (``None``)."""
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if digits is not None:
        return f"{text}.{fraction:06d}"
    return f"{text}.{fraction:06d}".rstrip("0") if fraction else text


def timetz(text: str) -> str:
    """``timetz`` in every mode: UTC, fraction trimmed, ``Z`` (``'13:45:30.5+02'`` ->
    ``'11:45:30.5Z'``)."""
    clock, offset = _offset_split(text)
    return _clock_text((_clock_us(clock) - offset * 1_000_000) % _DAY_US, None) + "Z"


def timestamptz(text: str) -> str:
    """``timestamptz`` in every mode: UTC, always 6 fraction digits, ``Z``."""
    if text[-3:] == "+00" and len(text) >= 22 and text[10] == " ":
        clock = text[11:-3]
        _clock_us(clock)
        fraction = clock[9:] if len(clock) > 8 else ""
        return f"{text[:10]}T{clock[:8]}.{fraction:0<6}Z"
    if text in _SPECIALS or text.endswith(" BC"):
        return text
    local, offset = _offset_split(text)
    micros = _stamp_us(local) - offset * 1_000_000
    days, clock_us = divmod(micros, _DAY_US)
    return f"{_java_year(_civil(days))}T{_clock_text(clock_us, 6)}Z"


def _civil(days: int) -> str:
    """``YYYY-MM-DD`` of epoch days (the inverse of :func:`_epoch_day`)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    return f"{year:04d}-{month:02d}-{day:02d}"


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
