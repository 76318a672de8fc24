"""The per-mode converters beyond the capture workload: edge values written by hand from
Debezium's documented forms (hstore, money, specials, typmods, far dates)."""

from __future__ import annotations

import base64

import orjson
import pytest

from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE, EnvelopeOptions
from connectors.postgres.types import ConversionError, TypeEntry, TypeRegistry
from connectors.postgres.types.connect import column_schema
from connectors.postgres.types.hstore import hstore_json, parse_hstore

HSTORE = 70_900
NUMERIC_12_2 = (12 << 16 | 2) + 4


def _options(**values: str) -> EnvelopeOptions:
    return EnvelopeOptions.model_validate({k.replace("_", "."): v for k, v in values.items()})


def _registry(options: EnvelopeOptions) -> TypeRegistry:
    registry = TypeRegistry(options)
    registry.add(TypeEntry(HSTORE, "hstore", "base", namespace="public"))
    return registry


def test_hstore_as_json_text_or_map() -> None:
    text = '"a"=>"1", "b \\"q\\""=>NULL, "c"=>"x\\\\y"'
    assert parse_hstore(text) == {"a": "1", 'b "q"': None, "c": "x\\y"}
    assert _registry(READABLE).converter(HSTORE)(text) == '{"a":"1","b \\"q\\"":null,"c":"x\\\\y"}'
    as_map = _registry(_options(hstore_handling_mode="map"))
    assert as_map.converter(HSTORE)(text) == parse_hstore(text)
    assert column_schema(HSTORE, -1, "h", True, as_map.options, as_map)["type"] == "map"
    with pytest.raises(ConversionError):
        as_map.converter(HSTORE)('"a"=>')


def test_hstore_keys_come_in_javas_hash_map_order() -> None:
    # Debezium put them into a java.util.HashMap: "q\"uote" (bucket 5) before "é" (bucket 9),
    # though the server sorts "é" (2 bytes) first. Jackson writes control characters in
    # upper-case hex. Both checked against the JVM (pgjdbc's HStoreConverter, Jackson).
    text = '"a"=>"1", "b"=>NULL, "é"=>"", "q\\"uote"=>"back\\\\slash"'
    json_text = _registry(READABLE).converter(HSTORE)(text)
    assert json_text == '{"a":"1","b":null,"q\\"uote":"back\\\\slash","é":""}'
    as_map = _registry(_options(hstore_handling_mode="map")).converter(HSTORE)(text)
    assert list(as_map) == ["a", "b", 'q"uote', "é"]
    assert hstore_json('"k"=>"\x1f\n"') == '{"k":"\\u001F\\n"}'
    # 13 keys: past 12 the table doubles to 32 buckets (the JVM's order for these keys).
    many = ", ".join(f'"x{i}"=>"{i}"' for i in range(13))
    assert list(orjson.loads(hstore_json(many))) == [
        "x8", "x9", "x10", "x0", "x12", "x1", "x11", "x2", "x3", "x4", "x5", "x6", "x7",
    ]  # fmt: skip


def test_money_is_a_scale_2_decimal() -> None:
    assert TypeRegistry(READABLE).converter(790)("-$1,234.56") == "-1234.56"
    precise = TypeRegistry(DEBEZIUM_DEFAULTS).converter(790)("$1.00")
    assert base64.b64decode(precise) == (100).to_bytes(1, "big")
    assert TypeRegistry(_options(decimal_handling_mode="double")).converter(790)("$0.50") == 0.5


@pytest.mark.parametrize(
    ("mode", "text", "expected"),
    [
        ("string", "Infinity", "POSITIVE_INFINITY"),  # Debezium's special value names
        ("string", "-Infinity", "NEGATIVE_INFINITY"),
        ("double", "Infinity", "Infinity"),
        ("double", "-0.5", -0.5),
        ("precise", "Infinity", None),
    ],
)
def test_numeric_specials(mode: str, text: str, expected: object) -> None:
    registry = TypeRegistry(_options(decimal_handling_mode=mode))
    assert registry.converter(1700, NUMERIC_12_2)(text) == expected


def test_precise_decimals_are_javas_two_complement() -> None:
    convert = TypeRegistry(DEBEZIUM_DEFAULTS).converter(1700, NUMERIC_12_2)
    assert [convert(t) for t in ("0.00", "1.28", "-1.28", "-1.29")] == [
        "AA==",
        "AIA=",
        "gA==",
        "/38=",
    ]
    variable = TypeRegistry(DEBEZIUM_DEFAULTS).converter(1700)
    assert variable("-5") == {"scale": 0, "value": "+w=="}
    huge = variable("9" * 5000 + ".5")  # past Python's 4300-digit int() limit
    value = int.from_bytes(base64.b64decode(huge["value"]), "big", signed=True)
    assert huge["scale"] == 1 and value == 10**5001 - 5


def test_a_domain_keeps_its_typmod() -> None:
    registry = TypeRegistry(DEBEZIUM_DEFAULTS)
    registry.add_rows([(70_950, "price", "d", 0, 1700, ",", "N", "public", None, NUMERIC_12_2)])
    assert registry.converter(70_950)("0.10") == "Cg=="
    schema = column_schema(70_950, -1, "p", True, registry.options, registry)
    assert schema["parameters"] == {"scale": "2", "connect.decimal.precision": "12"}


@pytest.mark.parametrize(
    ("oid", "typmod", "text", "adaptive", "connect"),
    [
        (1082, -1, "12345-06-07", 3_789_548, 3_789_548),  # 26 Gregorian cycles after 1945
        (1083, 0, "13:45:30", 49_530_000, 49_530_000),  # time(0): ms under adaptive
        (1083, -1, "24:00:00", 86_400_000_000, 86_400_000),
        (1114, 6, "1900-01-01 00:00:00.000001", -2_208_988_799_999_999, -2_208_988_800_000),
        (1186, -1, "-1 years -2 mons +3 days -04:05:06.25", -36_572_706_250_000, None),
        # What Debezium 3.6.1 streamed (tests/debezium/OBSERVED.md): sentinels, proleptic years.
        (1082, -1, "infinity", -2_147_472_692, -2_147_472_692),
        (1082, -1, "-infinity", -2_147_472_691, -2_147_472_691),
        (1082, -1, "4713-01-01 BC", -2_440_550, -2_440_550),
        (1114, 6, "infinity", 9_223_372_036_825_200_000, 9_223_372_036_825_200),
        (1114, 3, "-infinity", -9_223_372_036_832_400, -9_223_372_036_832_400),
        (1114, 6, "0044-03-15 13:45:30.123456 BC", -63_517_774_469_876_544, -63_517_774_469_877),
        (1114, 3, "0100-02-28 23:59:59.999 BC", -65_286_259_200_001, -65_286_259_200_001),
    ],
)
def test_epoch_numbers(
    oid: int, typmod: int, text: str, adaptive: int, connect: int | None
) -> None:
    assert TypeRegistry(DEBEZIUM_DEFAULTS).converter(oid, typmod)(text) == adaptive
    if connect is not None:
        connect_mode = TypeRegistry(_options(time_precision_mode="connect"))
        assert connect_mode.converter(oid, typmod)(text) == connect


@pytest.mark.parametrize(
    ("oid", "text", "expected"),
    [
        (1184, "2024-01-01 00:30:00.25-01:30", "2024-01-01T02:00:00.250000Z"),
        (1184, "10000-01-01 00:00:00+00", "+10000-01-01T00:00:00.000000Z"),  # Java's year sign
        (1184, "infinity", "infinity"),  # the differential test compares these live
        (1266, "00:30:00.000001+01", "23:30:00.000001Z"),
        (1114, "0001-02-29 00:00:00 BC", "0000-02-29T00:00:00Z"),  # 1 BC is year 0, a leap year
        (1114, "-infinity", "-290308-12-21T19:59:27.6Z"),
        (1082, "4713-01-01 BC", "-4712-01-01Z"),
        (1082, "-infinity", "-5877611-06-22Z"),
        (1186, "00:00:00.000001", "P0Y0M0DT0H0M0.000001S"),
        (1186, "-00:01:00.5", "P0Y0M0DT0H-1M-0.5S"),
        (1186, "-infinity", "-infinity"),  # PostgreSQL 17
    ],
)
def test_readable_edge_values(oid: int, text: str, expected: str) -> None:
    assert TypeRegistry(READABLE).converter(oid)(text) == expected


def test_bytea_modes() -> None:
    forms = {
        "bytes": "3q2+7w==",
        "base64": "3q2+7w==",
        "base64-url-safe": "3q2-7w==",
        "hex": "deadbeef",
    }
    for mode, expected in forms.items():
        registry = TypeRegistry(_options(binary_handling_mode=mode))
        assert registry.converter(17)("\\xDEADBEEF") == expected
        assert registry.converter(17)("\\336\\255\\276\\357") == expected  # bytea_output=escape
