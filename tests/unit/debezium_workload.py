"""The capture workload of ``tests/debezium/capture.py`` as PostgreSQL sends it: each column's
type OID and typmod, and the text of the rows whose records ``expected/<setting>.jsonl`` holds
(written by hand from the server's output forms under ``TEXT_FORMAT_SETTINGS``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from cdc.envelope.options import EnvelopeOptions
from connectors.postgres.types import TypeEntry, TypeRegistry
from tests.debezium.compare import snapshot_date

EXPECTED: Final = Path(__file__).resolve().parents[1] / "debezium" / "expected"
MOOD_OID: Final = 70_500
HSTORE_OID: Final = 70_600

#: Debezium's settings of each captured file, as our envelope options.
SETTINGS: Final[dict[str, dict[str, Any]]] = {
    "defaults": {
        "time.precision.mode": "adaptive", "decimal.handling.mode": "precise",
        "interval.handling.mode": "numeric", "binary.handling.mode": "bytes",
    },
    "readable": {},
    "readable_schemas": {"schemas.enable": True},
    "connect_double_hex": {
        "time.precision.mode": "connect", "decimal.handling.mode": "double",
        "interval.handling.mode": "numeric", "binary.handling.mode": "hex",
        "hstore.handling.mode": "map",
    },
    "micro_urlsafe": {
        "time.precision.mode": "adaptive_time_microseconds", "decimal.handling.mode": "precise",
        "interval.handling.mode": "string", "binary.handling.mode": "base64-url-safe",
    },
}  # fmt: skip


def _numeric(precision: int, scale: int) -> int:
    return (precision << 16 | scale) + 4


#: (name, type OID, typmod, NOT NULL or key) of capture.py's COLUMNS.
COLUMNS: Final = [
    ("id", 23, -1, True), ("region", 25, -1, True), ("c_int2", 21, -1, False),
    ("c_int4", 23, -1, False), ("c_int8", 20, -1, False),
    ("c_numeric", 1700, _numeric(12, 2), False), ("c_numeric_var", 1700, -1, False),
    ("c_float8", 701, -1, False), ("c_float4", 700, -1, False), ("c_text", 25, -1, False),
    ("c_varchar", 1043, 24, False), ("c_bytea", 17, -1, False), ("c_uuid", 2950, -1, False),
    ("c_date", 1082, -1, False), ("c_time", 1083, -1, False), ("c_time3", 1083, 3, False),
    ("c_timetz", 1266, -1, False), ("c_timestamp", 1114, -1, False),
    ("c_timestamp3", 1114, 3, False), ("c_timestamptz", 1184, -1, False),
    ("c_interval", 1186, -1, False), ("c_json", 114, -1, False), ("c_jsonb", 3802, -1, False),
    ("c_mood", MOOD_OID, -1, False), ("c_int_arr", 1007, -1, False),
    ("c_int_2d", 1007, -1, False), ("c_bool", 16, -1, False), ("c_toast", 25, -1, False),
    ("c_money", 790, -1, False), ("c_hstore", HSTORE_OID, -1, False),
    ("c_date_x", 1082, -1, False), ("c_timestamp_x", 1114, -1, False),
    ("c_timestamp3_x", 1114, 3, False), ("c_timestamptz_x", 1184, -1, False),
]  # fmt: skip

_ROW_1: Final = [
    "1", "eu", "32767", "2147483647", "9223372036854775807", "1234567890.12",
    "3.14159265358979", "Infinity", "1.5", 'hello "world"\n\ttab', "vc", "\\x00ff10",
    "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "2024-02-29", "13:45:30.123456", "13:45:30.123",
    "13:45:30.5+02", "2024-02-29 13:45:30.123456", "2024-02-29 13:45:30.123",
    "2024-02-29 13:45:30.5+00", "1 year 2 mons 3 days 04:05:06.789", '{"a": [1, 2.50, null]}',
    '{"b": {"c": true}}', "happy", "{1,2,3}", "{{1,2},{3,4}}", "t", "short",
    "$1,234,567.89", '"a"=>"1", "b"=>NULL, "é"=>"", "q\\"uote"=>"back\\\\slash"',
    "infinity", "infinity", "infinity", "infinity",
]  # fmt: skip
_ROW_4: Final = [
    "4", "mid", "0", "0", "0", "-0.01", "100000000000000000000", "0", "0", "unicode é 😀",
    "x", "\\x0102030405060708090a0b0c0d0e0f10", "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "2000-01-01", "23:59:59.999999", "00:00:00", "00:00:00+00", "9999-12-31 23:59:59.999999",
    "2000-01-01 00:00:00", "2000-01-01 00:00:00+00", "00:00:00", '{"u": "é"}', "{}", "ok",
    "{NULL,-1}", "{{NULL}}", None, None, "$0.00", '"k"=>"v"', "0044-03-15 BC",
    "0044-03-15 13:45:30.123456 BC", "0001-01-01 00:00:00.5 BC",
    "0001-12-31 23:59:59.999999+00 BC",
]  # fmt: skip
_ROW_2: Final = [
    "2", "us", "-32768", "-2147483648", "-9223372036854775808", "NaN", "NaN", "NaN",
    "-Infinity", "", "", "\\x", "00000000-0000-0000-0000-000000000000", "1969-12-31",
    "00:00:00", "23:59:59.999", "23:59:59-05:30", "1969-12-31 23:59:59.999999",
    "1969-12-31 23:59:59.999", "2024-07-01 06:59:59.999999+00", "-1 days -00:00:01", "[]",
    '"str"', "sad", "{}", "{{5,6,7},{8,9,10}}", "f", "x" * 10_000,
    "-$92,233,720,368,547,758.08", "", "-infinity", "-infinity", "-infinity", "-infinity",
]  # fmt: skip
#: Row 3 after the second streamed statement (its first update).
_ROW_3_UPDATED: Final = [
    "3", "ap", None, "42", None, "0.10", "-0.000123", "-Infinity", None, "updated", None,
    "\\xdeadbeef", None, None, None, None, None, None, None, "2000-01-01 00:00:00+00",
    "1 mon -2 days +03:00:00", '{"k": 1}', None, None, None, None, None, None,
    "-$0.01", '"x"=>NULL, "y"=>"2"', "4713-01-01 BC", "infinity", "0100-02-28 23:59:59.999 BC",
    "0044-03-15 10:00:00+00 BC",
]  # fmt: skip

#: (op, id, region) of the expected record -> the text it was written from.
ROWS: Final = {
    ("r", 1, "eu"): _ROW_1,
    ("r", 4, "mid"): _ROW_4,
    ("r", 2, "us"): _ROW_2,
    ("u", 3, "ap"): _ROW_3_UPDATED,
}
#: Multi-dimensional arrays keep their values: our documented deviation from Debezium.
DEVIATIONS: Final = frozenset({"c_int_2d"})


def equal(op: str, ours: Any, theirs: Any) -> bool:
    """Ours equals Debezium's value, or, in a snapshot row (op ``r``), is the date Debezium's
    snapshot gets wrong (infinity, BC) as its streaming writes it: the documented deviation
    "dates in snapshot rows" (``compare.snapshot_date``)."""
    if ours == theirs:
        return True
    dropped = snapshot_date(ours) if op == "r" else None
    return dropped is not None and type(dropped) is type(theirs) and dropped == theirs


def options(setting: str) -> EnvelopeOptions:
    return EnvelopeOptions.model_validate(SETTINGS[setting])


def registry(setting: str) -> TypeRegistry:
    """A registry under the setting's options that knows the ``mood`` enum and ``hstore``."""
    types = TypeRegistry(options(setting))
    types.add_rows([(MOOD_OID, "mood", "e", 0, 0, ",", "E", "public", ["sad", "ok", "happy"])])
    types.add(TypeEntry(HSTORE_OID, "hstore", "base", namespace="public"))
    return types


def records(setting: str) -> list[dict[str, Any]]:
    """The captured records of ``tricky`` (not ``tricky_full``) with a value."""
    lines = (EXPECTED / f"{setting}.jsonl").read_text(encoding="utf-8").splitlines()
    found = [json.loads(line) for line in lines]
    return [r for r in found if r["topic"] == "dbz.public.tricky" and r["value"] is not None]


def payload(record: dict[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = record["value"]
    return value["payload"] if "schema" in value else value


def expected_after(setting: str) -> dict[tuple[str, int, str], dict[str, Any]]:
    """The ``after`` of each record of :data:`ROWS`, by ``(op, id, region)``."""
    found = {}
    for record in records(setting):
        body = payload(record)
        after = body["after"]
        if after is not None and (body["op"], after["id"], after["region"]) in ROWS:
            found[body["op"], after["id"], after["region"]] = after
    return found


def expected_fields(setting: str) -> list[dict[str, Any]]:
    """The ``after`` struct's field schemas of the setting's first record."""
    value = records(setting)[0]["value"]
    after = next(f for f in value["schema"]["fields"] if f["field"] == "after")
    fields: list[dict[str, Any]] = after["fields"]
    return fields
