"""cdc.records.values against the records the real Debezium 3.6.1 wrote (tests/debezium/expected).

Every setting's records decode to the same canonical values as the readable setting's records
of the same change, except where a setting itself loses information (a double, µs intervals,
ms times), which is compared at the precision that setting keeps.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE, EnvelopeOptions
from cdc.records.values import Interval, decode, decoder
from tests.debezium.workload import COLUMNS

EXPECTED = Path(__file__).resolve().parents[1] / "debezium" / "expected"
UTC = dt.UTC

SETTINGS: dict[str, EnvelopeOptions] = {
    "defaults": DEBEZIUM_DEFAULTS,
    "readable": READABLE,
    "readable_schemas": READABLE.model_copy(update={"schemas_enable": True}),
    "connect_double_hex": DEBEZIUM_DEFAULTS.model_copy(
        update={
            "decimal_handling_mode": "double",
            "time_precision_mode": "connect",
            "binary_handling_mode": "hex",
            "hstore_handling_mode": "map",
        }
    ),
    "micro_urlsafe": DEBEZIUM_DEFAULTS.model_copy(
        update={
            "time_precision_mode": "adaptive_time_microseconds",
            "binary_handling_mode": "base64-url-safe",
            "interval_handling_mode": "string",
        }
    ),
}


def column_types() -> dict[str, str]:
    """The tricky table's columns and their types, from the capture workload's DDL."""
    ddl = COLUMNS
    found = re.findall(r"(id|region|c_\w+) ([a-z0-9_]+(?:\(\d+(?:,\d+)?\))?(?:\[\])*)", ddl)
    types = dict(found)
    types["c_mood"] = "mood"
    return types


TYPES = column_types()


def _payload(data: Any) -> Any:
    if isinstance(data, dict) and data.keys() == {"schema", "payload"}:
        return data["payload"]
    return data


def records(setting: str) -> list[dict[str, Any]]:
    """The setting's data records (tombstones and truncates left out), payloads unwrapped."""
    out = []
    for line in (EXPECTED / f"{setting}.jsonl").read_text().splitlines():
        raw = orjson.loads(line)
        value = _payload(raw["value"])
        if value is not None and value["op"] != "t":
            out.append(value)
    return out


def decoded(row: dict[str, Any] | None, options: EnvelopeOptions) -> dict[str, Any] | None:
    if row is None:
        return None
    return {name: decode(value, TYPES[name], options) for name, value in row.items()}


def test_every_column_type_is_known() -> None:
    assert len(TYPES) == 34 and TYPES["c_numeric"] == "numeric(12,2)"
    assert TYPES["c_money"] == "money" and TYPES["c_hstore"] == "hstore"
    assert TYPES["c_int_2d"] == "int4[][]" and TYPES["c_time3"] == "time(3)"


def test_first_row_decodes_to_what_was_inserted_under_readable_and_defaults() -> None:
    first = {
        "c_numeric": Decimal("1234567890.12"),
        "c_numeric_var": Decimal("3.14159265358979"),
        "c_float8": float("inf"),
        "c_bytea": b"\x00\xff\x10",
        "c_date": dt.date(2024, 2, 29),
        "c_time": dt.time(13, 45, 30, 123456),
        "c_time3": dt.time(13, 45, 30, 123000),
        "c_timetz": dt.time(11, 45, 30, 500000, tzinfo=UTC),
        "c_timestamp": dt.datetime(2024, 2, 29, 13, 45, 30, 123456),
        "c_timestamp3": dt.datetime(2024, 2, 29, 13, 45, 30, 123000),
        "c_timestamptz": dt.datetime(2024, 2, 29, 13, 45, 30, 500000, tzinfo=UTC),
        "c_json": '{"a": [1, 2.50, null]}',
        "c_int_arr": [1, 2, 3],
    }
    for setting in ("readable", "defaults"):
        row = decoded(records(setting)[0]["after"], SETTINGS[setting])
        assert row is not None
        assert {name: row[name] for name in first} == first, setting
        assert row["c_numeric"].as_tuple().exponent == -2
    readable = decoded(records("readable")[0]["after"], READABLE)
    defaults = decoded(records("defaults")[0]["after"], DEBEZIUM_DEFAULTS)
    assert readable is not None and defaults is not None
    months_days = Interval(14, 3, (4 * 3600 + 5 * 60 + 6) * 1_000_000 + 789_000)
    assert readable["c_interval"] == months_days
    assert defaults["c_interval"] == Interval(0, 0, 37091106789000)  # months as 30.4375 days


def _lossy(setting: str, name: str, value: Any) -> Any:
    """``value`` at the precision ``setting`` keeps for column ``name``."""
    options = SETTINGS[setting]
    if isinstance(value, Interval) and options.interval_handling_mode == "numeric":
        days = value.months * 30.4375 + value.days
        return Interval(0, 0, round(days * 86_400_000_000) + value.microseconds)
    if isinstance(value, Decimal) and options.decimal_handling_mode == "double":
        return value if not value.is_finite() else decode(float(value), TYPES[name], options)
    connect = options.time_precision_mode == "connect"
    zoned = TYPES[name] in ("timetz", "timestamptz")
    if connect and not zoned and isinstance(value, dt.time | dt.datetime):
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    if connect and not zoned and isinstance(value, str) and value.endswith(" BC"):
        # PostgreSQL's text of a BC timestamp: the fraction cut to ms, then trimmed.
        return re.sub(r"\.(\d{1,3})\d*", lambda m: f".{m[1]}".rstrip("0").rstrip("."), value)
    return value


def _nan(value: Any) -> bool:
    return isinstance(value, Decimal) and value.is_nan()


#: Debezium's snapshots overflow a date infinity, differently as epoch days and as ISO text
#: (the differential test's documented "dates in snapshot rows"): not comparable across modes.
#: Decoded as PostgreSQL's text of those far years (``cdc.records.values.far_iso``).
_SNAPSHOT_INFINITY = ("292278994-08-16", "292269055-12-02")


def _comparable(name: str, value: Any) -> Any:
    if TYPES[name] == "hstore" and isinstance(value, str):  # JSON text (json), or a map (map)
        return orjson.loads(value)
    if isinstance(value, Decimal) and value.is_nan():
        return "NaN"
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s != "readable"])
def test_every_setting_decodes_to_the_readable_values(setting: str) -> None:
    options = SETTINGS[setting]
    theirs, ours = records(setting), records("readable")
    assert len(theirs) == len(ours)
    for mine, readable in zip(theirs, ours, strict=True):
        for side in ("before", "after"):
            got, want = decoded(mine[side], options), decoded(readable[side], READABLE)
            if want is None or got is None:
                assert got == want
                continue
            for name, expected in want.items():
                if mine["op"] == "r" and expected in _SNAPSHOT_INFINITY:
                    continue
                if _nan(expected) and options.decimal_handling_mode == "precise":
                    assert got[name] is None, (setting, name)  # Connect's Decimal has no NaN
                    continue
                lossy = _lossy(setting, name, expected)
                assert _comparable(name, got[name]) == _comparable(name, lossy), (
                    setting,
                    mine["op"],
                    side,
                    name,
                )


def test_double_mode_keeps_the_scale_of_the_column_type() -> None:
    double = SETTINGS["connect_double_hex"]
    assert decode(0.1, "numeric(12,2)", double) == Decimal("0.10")
    assert str(decode(0.1, "numeric(12,2)", double)) == "0.10"
    assert decode(1.23456789012e9, "numeric(12,2)", double) == Decimal("1234567890.12")
    assert decode("NaN", "numeric", double).is_nan()
    assert decode(1e20, "numeric", double) == Decimal("1E+20")


def test_precise_mode_decodes_negative_unscaled_values() -> None:
    assert decode("/w==", "numeric(12,2)", DEBEZIUM_DEFAULTS) == Decimal("-0.01")
    assert decode("Cg==", "numeric(12,2)", DEBEZIUM_DEFAULTS) == Decimal("0.10")
    assert decode({"scale": 0, "value": "BWvHXi1jEAAA"}, "numeric", DEBEZIUM_DEFAULTS) == Decimal(
        "100000000000000000000"
    )
    assert decode(None, "numeric(12,2)", DEBEZIUM_DEFAULTS) is None


def test_string_forms_of_decimals_and_intervals() -> None:
    assert decode("NAN", "numeric(12,2)", READABLE).is_nan()
    assert decode("-0.01", "numeric(12,2)", READABLE) == Decimal("-0.01")
    assert decode("P0Y0M-1DT0H0M-1S", "interval", READABLE) == Interval(0, -1, -1_000_000)
    assert decode("P0Y1M-2DT3H0M0S", "interval", READABLE) == Interval(1, -2, 3 * 3_600_000_000)
    assert decode("P0Y0M0DT0H0M0S", "interval", READABLE) == Interval()
    assert decode(-86401000000, "interval", DEBEZIUM_DEFAULTS) == Interval(0, 0, -86401000000)


@pytest.mark.parametrize(
    ("mode", "text"),
    [
        ("bytes", "3q2+7w=="),
        ("base64", "3q2+7w=="),
        ("base64-url-safe", "3q2-7w=="),
        ("hex", "deadbeef"),
    ],
)
def test_bytea_in_every_binary_mode(mode: str, text: str) -> None:
    options = READABLE.model_copy(update={"binary_handling_mode": mode})
    assert decode(text, "bytea", options) == b"\xde\xad\xbe\xef"
    assert decode([text, None], "bytea[]", options) == [b"\xde\xad\xbe\xef", None]


def test_times_by_mode_and_precision() -> None:
    connect = SETTINGS["connect_double_hex"]
    micro = SETTINGS["micro_urlsafe"]
    assert decode(49530123, "time(3)", DEBEZIUM_DEFAULTS) == dt.time(13, 45, 30, 123000)
    assert decode(49530123000, "time(3)", micro) == dt.time(13, 45, 30, 123000)
    assert decode(86399999, "time", connect) == dt.time(23, 59, 59, 999000)
    assert decode(19782, "date", connect) == dt.date(2024, 2, 29)
    assert decode(-1, "date", DEBEZIUM_DEFAULTS) == dt.date(1969, 12, 31)
    assert decode("1969-12-31Z", "date", READABLE) == dt.date(1969, 12, 31)
    assert decode("00:00:00Z", "time without time zone", READABLE) == dt.time(0)
    assert decode(1709214330123, "timestamp(3)", DEBEZIUM_DEFAULTS) == dt.datetime(
        2024, 2, 29, 13, 45, 30, 123000
    )
    assert decode(1709214330123, "timestamp", connect) == dt.datetime(
        2024, 2, 29, 13, 45, 30, 123000
    )
    assert decode("05:29:59Z", "time with time zone", connect) == dt.time(5, 29, 59, tzinfo=UTC)


def test_the_legacy_encoding() -> None:
    assert decode({"a": [1, 2.5]}, "jsonb", None) == '{"a":[1,2.5]}'
    assert decode("str", "json", None) == '"str"'
    assert decode("str", "json", READABLE) == "str"  # Debezium's: the text of the document
    assert decode("NaN", "numeric(12,2)", None).is_nan()
    assert decode("2024-02-29", "date", None) == dt.date(2024, 2, 29)
    assert decode("2024-02-29T13:45:30.5", "timestamp", None) == dt.datetime(
        2024, 2, 29, 13, 45, 30, 500000
    )
    assert decode("13:45:30.5+02", "timetz", None) == dt.time(11, 45, 30, 500000, tzinfo=UTC)
    assert decode("P-1DT-1S", "interval", None) == Interval(0, -1, -1_000_000)
    assert decode("0044-03-15 BC", "date", None) == "0044-03-15 BC"  # beyond Python's date


def test_decoder_passes_canonical_values_through() -> None:
    run = decoder("numeric(12,2)", DEBEZIUM_DEFAULTS)
    once = run("HL6ZGhQ=")
    assert run(once) == once
    stamp = decoder("timestamptz", READABLE)
    value = stamp("2024-02-29T13:45:30.500000Z")
    assert stamp(value) == value
    assert decoder("text", DEBEZIUM_DEFAULTS)("x") == "x"
    assert decoder("int4[][]", READABLE)([[1, None], [3, 4]]) == [[1, None], [3, 4]]
