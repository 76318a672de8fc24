"""The matrix test's values (``tests/e2e/test_matrix.py``): the source's and each sink's rows.

Every value is brought to one comparable form, whichever side it comes from:

- the source: PostgreSQL's own text output (``TimeZone`` UTC, ``IntervalStyle`` iso_8601;
  ``money``, ``hstore`` and arrays through ``numeric``/``to_json``), then the setting's known
  losses (Debezium's ``precise`` decimals carry no NaN; ``numeric`` intervals count a month as
  30.4375 days);
- an envelope row (Redis, search, jsonl): Debezium's documented encodings for the setting;
- DuckDB: the typed values DuckDB returns, its temporal values as DuckDB's text.

Written from Debezium's and PostgreSQL's documentation, not from the product's converters, so
a converter's mistake shows as a difference instead of agreeing with itself.
"""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import redis
from psycopg import sql

from sinks.search import SearchSinkConfig, SearchSinkPlugin
from tests.e2e.matrix_tables import Table

Rows = dict[tuple[Any, ...], dict[str, Any]]
ABSENT = "<absent>"

# --- the source ---------------------------------------------------------------------------


def _select(name: str, kind: str) -> sql.Composable:
    column = sql.Identifier(name)
    if kind == "money":
        return sql.SQL("{}::numeric::text").format(column)
    if kind == "hstore":
        return sql.SQL("hstore_to_json({})::text").format(column)
    if kind.endswith("]"):
        return sql.SQL("to_json({})::text").format(column)
    return sql.SQL("{}::text").format(column)


def source_rows(dsn: str, table: Table) -> Rows:
    """The table's rows in the comparable form, by key."""
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(_select(n, t) for n, t in table.columns), sql.Identifier(table.name)
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute("SET IntervalStyle = 'iso_8601'")
        conn.execute("SET DateStyle = 'ISO, YMD'")
        rows = conn.execute(query).fetchall()
    return keyed(
        [{n: from_source(t, v) for (n, t), v in zip(table.columns, r, strict=True)} for r in rows],
        table,
    )


def kind_of(type_name: str) -> str:
    """``numeric(12,2)`` -> ``numeric``; arrays keep their brackets."""
    return re.sub(r"\(.*?\)", "", type_name)


def from_source(type_name: str, text: str | None) -> Any:
    if text is None:
        return None
    kind = kind_of(type_name)
    if kind in ("int2", "int4", "int8"):
        return int(text)
    if kind in ("numeric", "money"):
        return decimal(text)
    if kind in ("float8", "float4"):
        return floating(float(text), kind)
    if kind == "bytea":
        return bytes.fromhex(text[2:])
    if kind == "bool":
        return text in ("t", "true")
    if kind in TEMPORAL:
        return TEMPORAL[kind](text)
    if kind == "interval":
        return iso_interval(text)
    if kind in ("json", "jsonb", "hstore") or kind.endswith("]"):
        return orjson.loads(text)
    return text


def expected(source: Rows, options: dict[str, Any], table: Table) -> Rows:
    """``source`` with the losses the setting's encoding makes."""
    types = table.types
    return {k: {n: lossy(types[n], v, options) for n, v in r.items()} for k, r in source.items()}


def lossy(type_name: str, value: Any, options: dict[str, Any]) -> Any:
    kind = kind_of(type_name)
    precise = options["decimal.handling.mode"] == "precise"
    if kind == "numeric" and precise and (value == "nan" or _infinite(value)):
        return None  # Debezium's Decimal and VariableScaleDecimal have no NaN nor infinity
    if kind == "interval" and value is not None and options["interval.handling.mode"] == "numeric":
        return interval_micros(*value)
    return value


def _infinite(value: Any) -> bool:
    return isinstance(value, Decimal) and value.is_infinite()


# --- comparable forms -----------------------------------------------------------------------

MICROS_PER_DAY = 86_400_000_000
#: Debezium's MicroDuration: a month is 365.25 / 12 days.
MICROS_PER_MONTH = 2_629_800_000_000


def decimal(text: str) -> Any:
    if text.lower() == "nan":
        return "nan"
    number = Decimal(text)
    return number.normalize() if number else Decimal(0)


def floating(number: float, kind: str) -> Any:
    if number != number:
        return "nan"
    if kind in ("float4", "REAL"):
        return struct.unpack("f", struct.pack("f", number))[0]
    return number


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (year 0 is 1 BC)."""
    year -= month <= 2
    era = year // 400  # floor division: Hinnant's (y - 399) / 400 truncates in C
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


_STAMP = re.compile(
    r"^(?P<sign>[+-])?(?P<y>\d{4,})-(?P<m>\d\d)-(?P<d>\d\d)(?: \(BC\))?"
    r"(?:[ T](?P<time>\d\d:\d\d:\d\d(?:\.\d+)?))?(?P<zone>Z|[+-]\d\d(?::?\d\d)?)?(?P<bc> BC)?$"
)


def timestamp(text: str) -> Any:
    """Proleptic microseconds since the epoch (UTC for a zone), or an infinity."""
    if text in ("infinity", "-infinity"):
        return text
    match = _STAMP.match(text)
    assert match is not None, text
    year = int(match["y"])
    if match["bc"] or "(BC)" in text:
        year = 1 - year
    elif match["sign"] == "-":
        year = -year
    days = days_from_civil(year, int(match["m"]), int(match["d"]))
    micros = time_of_day(match["time"] or "00:00:00")
    return days * MICROS_PER_DAY + micros - zone_micros(match["zone"])


def date(text: str) -> Any:
    stamp = timestamp(text)
    return stamp if isinstance(stamp, str) else stamp // MICROS_PER_DAY


def time_of_day(text: str) -> int:
    """``HH:MM:SS[.ffffff]`` as microseconds (a zone suffix converts to UTC)."""
    match = re.match(r"^(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d(?::?\d\d)?)?$", text)
    assert match is not None, text
    hours, minutes, seconds, fraction, zone = match.groups()
    micros = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000
    micros += int((fraction or "").ljust(6, "0")[:6])
    return (micros - zone_micros(zone)) % MICROS_PER_DAY if zone else micros


def zone_micros(zone: str | None) -> int:
    if zone in (None, "Z"):
        return 0
    assert zone is not None
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    return sign * (int(digits[:2]) * 60 + int(digits[2:4] or 0)) * 60_000_000


TEMPORAL: dict[str, Callable[[str], Any]] = {
    "date": date,
    "time": time_of_day,
    "timetz": time_of_day,
    "timestamp": timestamp,
    "timestamptz": timestamp,
}

_ISO = re.compile(
    r"^P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?"
    r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d+)?)S)?)?$"
)


def iso_interval(text: str) -> tuple[int, int, int]:
    """An ISO-8601 duration as ``(months, days, microseconds)``."""
    match = _ISO.match(text)
    assert match is not None, text
    years, months, days, hours, minutes = (int(g or 0) for g in match.groups()[:5])
    seconds = Decimal(match.group(6) or 0)
    micros = (hours * 3600 + minutes * 60) * 1_000_000 + int(seconds * 1_000_000)
    return years * 12 + months, days, micros


def interval_micros(months: int, days: int, micros: int) -> int:
    return months * MICROS_PER_MONTH + days * MICROS_PER_DAY + micros


# --- envelope rows (Redis, search, jsonl) ------------------------------------------------------

#: Debezium's infinity sentinels, which the envelope keeps (as Debezium streams them) and the
#: JSON sinks therefore hold: a date's PostgreSQL infinities are its int32 day numbers shifted
#: to 1970 and wrapped, a timestamp's are Long.MAX/MIN microseconds (here as microseconds
#: since the epoch, whichever unit or text the setting writes them in).
DATE_INFINITIES = {-2147472692: "infinity", -2147472691: "-infinity"}
STAMP_INFINITIES = {9223372036825200000: "infinity", -9223372036832400000: "-infinity"}


def from_envelope(type_name: str, value: Any, options: dict[str, Any]) -> Any:
    """An envelope's value as :func:`from_source` gives the source's."""
    if value is None:
        return None
    kind = kind_of(type_name)
    if kind in ("numeric", "money"):
        return _envelope_decimal(type_name, value, options)
    if kind in ("float8", "float4"):
        return floating(float(value), kind)
    if kind == "bytea":
        return base64.b64decode(value)
    if kind in ("json", "jsonb", "hstore"):
        return orjson.loads(value)
    if kind == "interval":
        return iso_interval(value) if isinstance(value, str) else int(value)
    if kind in TEMPORAL:
        return _envelope_temporal(type_name, value)
    return value


#: Debezium's names of numeric's special values in ``string`` mode (SpecialValueDecimal).
SPECIAL_DECIMALS = {"NAN": "NaN", "POSITIVE_INFINITY": "Infinity", "NEGATIVE_INFINITY": "-Infinity"}


def _envelope_decimal(type_name: str, value: Any, options: dict[str, Any]) -> Any:
    if options["decimal.handling.mode"] == "string":
        return decimal(SPECIAL_DECIMALS.get(value, value))
    if isinstance(value, dict):  # VariableScaleDecimal
        unscaled = int.from_bytes(base64.b64decode(value["value"]), "big", signed=True)
        return decimal(str(Decimal(unscaled).scaleb(-int(value["scale"]))))
    scale = int(re.search(r",(\d+)\)", type_name)[1]) if "," in type_name else 2  # type: ignore[index]
    unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
    return decimal(str(Decimal(unscaled).scaleb(-scale)))


def _envelope_temporal(type_name: str, value: Any) -> Any:
    kind = kind_of(type_name)
    if isinstance(value, str):
        found = TEMPORAL[kind](value)
    elif kind == "date":
        found = value  # io.debezium.time.Date: days since the epoch
    else:  # Time and Timestamp count milliseconds, MicroTime and MicroTimestamp micros
        found = value * 1000 if type_name.endswith("(3)") else value
    if kind == "date":
        return DATE_INFINITIES.get(found, found)
    return STAMP_INFINITIES.get(found, found) if kind == "timestamp" else found


def envelope_row(row: dict[str, Any], options: dict[str, Any], table: Table) -> dict[str, Any]:
    return {n: from_envelope(t, row[n], options) if n in row else ABSENT for n, t in table.columns}


def keyed(rows: list[dict[str, Any]], table: Table) -> Rows:
    return {tuple(r[k] for k in table.key): r for r in rows}


def redis_rows(url: str, prefix: str, table: Table, options: dict[str, Any]) -> Rows:
    """The Redis sink's rows: one string a row under ``<prefix>:public.<table>:<key>``."""
    client = redis.Redis.from_url(url)
    try:
        names = sorted(client.scan_iter(match=f"{prefix}:public.{table.name}:*", count=1000))
        values = client.mget(names) if names else []
    finally:
        client.close()
    rows = [envelope_row(orjson.loads(v), options, table) for v in values if v is not None]
    return keyed(rows, table)


def search_rows(path: Path, table: Table, options: dict[str, Any]) -> Rows:
    config = SearchSinkConfig(name="search", path=str(path))
    rows = SearchSinkPlugin.read_rows(config, "public", table.name)
    return keyed([envelope_row(row, options, table) for _, row in rows], table)


def jsonl_rows(directory: Path, topic: str, table: Table, options: dict[str, Any]) -> Rows:
    """The state the jsonl sink's lines describe: each key's last row, deletes and truncates
    applied in the file's order."""
    state: dict[bytes, dict[str, Any]] = {}
    file = directory / f"{topic}.jsonl"
    for line in file.read_bytes().splitlines() if file.exists() else []:
        record = orjson.loads(line)
        value = record["value"]
        payload = value.get("payload", value) if isinstance(value, dict) else None
        key = orjson.dumps(record["key"], option=orjson.OPT_SORT_KEYS)
        if payload is None or payload["op"] == "d":
            state.pop(key, None)
        elif payload["op"] == "t":
            state.clear()
        else:
            state[key] = payload["after"]
    return keyed([envelope_row(row, options, table) for row in state.values()], table)


# --- DuckDB ----------------------------------------------------------------------------------

_DUCK_INTERVAL = re.compile(
    r"^(?:(-?\d+) years? ?)?(?:(-?\d+) months? ?)?(?:(-?\d+) days? ?)?"
    r"(?:(-?)(\d+):(\d\d):(\d\d(?:\.\d+)?))?$"
)


def duck_interval(text: str, options: dict[str, Any]) -> Any:
    match = _DUCK_INTERVAL.match(text.strip())
    assert match is not None, text
    years, months, days = (int(g or 0) for g in match.groups()[:3])
    sign, hours, minutes, seconds = match.groups()[3:]
    micros = int((int(hours or 0) * 3600 + int(minutes or 0) * 60) * 1_000_000)
    micros += int(Decimal(seconds or 0) * 1_000_000)
    value = (years * 12 + months, days, -micros if sign == "-" else micros)
    if options["interval.handling.mode"] == "numeric":
        return interval_micros(*value)
    return value


def from_duckdb(type_name: str, value: Any, options: dict[str, Any]) -> Any:
    if value is None:
        return None
    kind = kind_of(type_name)
    if kind in TEMPORAL:
        return TEMPORAL[kind](
            str(value).replace(" (BC)", "") + (" BC" if "(BC)" in str(value) else "")
        )
    if kind == "interval":
        return duck_interval(str(value), options)
    if kind in ("numeric", "money"):
        return decimal(str(value))
    if kind in ("float8", "float4"):
        return floating(float(value), kind)
    if kind == "bytea":
        return bytes(value)
    if kind == "uuid":
        return str(value)
    if kind in ("json", "jsonb", "hstore"):
        return orjson.loads(value) if isinstance(value, str) else value
    if kind.endswith("]") and isinstance(value, str):
        return orjson.loads(value)
    return value


def duckdb_rows(path: Path, table: Table, history: bool, options: dict[str, Any]) -> Rows:
    """The DuckDB sink's table (or, ``history``, its open versions) read with DuckDB's SQL."""
    target = f'"public"."{table.name}{"__history" if history else ""}"'
    where = " WHERE valid_to IS NULL" if history else ""
    with duckdb.connect(str(path), read_only=True) as db:
        db.execute("SET TimeZone = 'UTC'")
        types = dict(
            db.execute(f"SELECT column_name, column_type FROM (DESCRIBE {target})").fetchall()
        )
        select = ", ".join(_duck_select(n, types[n]) for n, _ in table.columns)
        rows = db.execute(f"SELECT {select} FROM {target}{where}").fetchall()
    return keyed(
        [
            {n: from_duckdb(t, v, options) for (n, t), v in zip(table.columns, r, strict=True)}
            for r in rows
        ],
        table,
    )


def _duck_select(name: str, duck_type: str) -> str:
    column = f'"{name}"'
    if duck_type.startswith(("DATE", "TIME", "INTERVAL")):
        return f"CAST({column} AS VARCHAR)"
    return column
