"""Dates and timestamps past Python's years (BC, after 9999) in one comparable text form.

Python's ``datetime`` holds years 1 to 9999; PostgreSQL's run from 4713 BC to 294276 AD, and
each side hands such a value over as text in its own form: PostgreSQL's
(``0044-03-15 13:45:30.123456 BC``, ``12345-01-01 00:00:00``, ``... 10:00:00+00 BC``), ISO-8601
with a signed year (``-0043-03-15T13:45:30.123456Z``, ``+12345-01-01``, Debezium's), or
DuckDB's as its reader gives it back (PostgreSQL's form). :func:`far_temporal` reads any of
them into the same text, so equal instants compare equal and different ones do not.

The Gregorian calendar repeats every 400 years (146,097 days, weekdays included), so a value is
moved by whole 400-year cycles into Python's range, converted there (an offset to UTC), and
written back with its real year: astronomical numbering (year 0 is 1 BC), ISO style
(``-0043-03-15T13:45:30.123456``, ``+12345-01-01T00:00:00+00:00``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Final

_CYCLE_YEARS: Final = 400
_FAR: Final = re.compile(
    r"(?P<sign>[+-])?(?P<year>\d{4,})-(?P<month>\d\d)-(?P<day>\d\d)"
    r"(?:[T ](?P<clock>\d\d:\d\d:\d\d)(?P<fraction>\.\d+)?)?"
    r"(?P<zone>Z|[+-]\d\d(?::?\d\d(?::?\d\d)?)?)?"
    r"(?P<era> BC)?"
)


def far_temporal(text: str, with_zone: bool, clock: bool) -> str:
    """``text`` (a date, ``clock=False``, or a timestamp) in the canonical text form.

    Text that is no date or timestamp in a known form is returned as it is (compared as text,
    so reported as a difference rather than crashing the comparison).
    """
    match = _FAR.fullmatch(text.strip())
    if match is None:
        return text
    year = int(match["year"])
    if match["era"]:
        year = 1 - year  # 1 BC is year 0
    elif match["sign"] == "-":
        year = -year
    cycles = (year - 2000) // _CYCLE_YEARS
    shifted = year - cycles * _CYCLE_YEARS  # in [2000, 2400): Python can hold it and its offset
    moment = datetime(shifted, int(match["month"]), int(match["day"]))
    if clock and match["clock"]:
        hour, minute, second = (int(part) for part in match["clock"].split(":"))
        micros = round(float(match["fraction"] or 0) * 1_000_000)
        moment += timedelta(hours=hour, minutes=minute, seconds=second, microseconds=micros)
    if with_zone:
        moment = moment.replace(tzinfo=utc_offset(match["zone"])).astimezone(UTC)
    return _written(moment, cycles, clock)


def utc_offset(text: str | None) -> timezone:
    """A UTC offset (``Z``, ``+02``, ``-03:30``); none written means UTC."""
    if text is None or text == "Z":
        return UTC
    digits = text[1:].replace(":", "").ljust(6, "0")
    offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4]), seconds=int(digits[4:6]))
    return timezone(-offset if text[0] == "-" else offset)


def _written(moment: datetime, cycles: int, clock: bool) -> str:
    """``moment``'s ISO text with its year moved back by ``cycles`` 400-year cycles; a year in
    Python's range is written as ``datetime.isoformat`` writes it."""
    year = moment.year + cycles * _CYCLE_YEARS
    rest = (moment.isoformat() if clock else moment.date().isoformat())[4:]
    if 1 <= year <= 9999:
        return f"{year:04d}{rest}"
    return f"{'-' if year < 0 else '+'}{abs(year):04d}{rest}"
