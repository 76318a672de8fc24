"""The MongoDB source's pure parts: BSON to relaxed Extended JSON, positions and tokens, ``_id``
ranges, stream plans, snapshot decisions, the published schema, error classification."""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid
from typing import Any

import bson
import orjson
import pytest
from bson import (
    Binary,
    Code,
    DBRef,
    Decimal128,
    Int64,
    MaxKey,
    MinKey,
    ObjectId,
    Regex,
    Timestamp,
    json_util,
)
from bson.datetime_ms import DatetimeMS
from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

from cdc.contracts.errors import SourceFatal, SourceUnavailable
from cdc.records.normalize import canonical_row
from connectors.mongodb import errors, positions, ranges
from connectors.mongodb.config import MongoSourceConfig
from connectors.mongodb.convert import document, key_of, to_json
from connectors.mongodb.fields import FieldTracker
from connectors.mongodb.plan import plan_streams
from connectors.mongodb.source import decide

OID = ObjectId("599af247bb69cd89961c986d")


def reference(value: Any) -> Any:
    return orjson.loads(json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS))


EVERY_TYPE: dict[str, Any] = {
    "_id": OID,
    "int32": -7,
    "int64": Int64(2**53 + 1),
    "double": 2.5,
    "nan": math.nan,
    "inf": math.inf,
    "ninf": -math.inf,
    "string": "ünïcode ✓",
    "true": True,
    "null": None,
    "decimal": Decimal128("-1234567890.123456789012345678901234"),
    "decimal_special": Decimal128("NaN"),
    "date": dt.datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=dt.UTC),
    "date_naive": dt.datetime(2020, 1, 1),
    "date_pre_epoch": dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=dt.UTC),
    "date_out_of_range": DatetimeMS(2**62),
    "binary": Binary(b"\x00\xff\x10", 0),
    "uuid": Binary(uuid.UUID(int=1).bytes, 4),
    "user_binary": Binary(b"x", 0x80),
    "bytes": b"raw",
    "regex": Regex("^a.*", "i"),
    "timestamp": Timestamp(1700000000, 3),
    "min": MinKey(),
    "max": MaxKey(),
    "code": Code("function() {}"),
    "ref": DBRef("users", OID, "db"),
    "nested": {"a": [1, {"b": Decimal128("0.10")}, [Int64(3)]], "empty": {}, "list": []},
}


@pytest.mark.parametrize("field", sorted(EVERY_TYPE))
def test_each_value_matches_json_util_relaxed(field: str) -> None:
    assert to_json(EVERY_TYPE[field]) == reference(EVERY_TYPE[field])


def test_the_documented_forms() -> None:
    converted = document(EVERY_TYPE)
    assert list(converted) == list(EVERY_TYPE)  # field order is kept
    assert converted["_id"] == {"$oid": "599af247bb69cd89961c986d"}
    assert converted["int64"] == 2**53 + 1 and type(converted["int64"]) is int
    assert converted["decimal"] == {"$numberDecimal": "-1234567890.123456789012345678901234"}
    assert converted["date"] == {"$date": "2024-02-29T23:59:59.999Z"}
    # BSON dates are UTC; a zoned datetime (never decoded by pymongo) is written in UTC too,
    # where json_util would keep the offset.
    zoned = dt.datetime(2020, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert to_json(zoned) == {"$date": "2020-01-01T00:00:00Z"}
    assert converted["date_pre_epoch"] == {"$date": {"$numberLong": "-1000"}}
    assert converted["binary"] == {"$binary": {"base64": "AP8Q", "subType": "00"}}
    assert converted["nan"] == {"$numberDouble": "NaN"}
    orjson.dumps(converted)  # JSON-ready as it is
    assert json_util.loads(orjson.dumps(converted["decimal"])) == EVERY_TYPE["decimal"]


def test_key_keeps_only_the_id() -> None:
    assert key_of({"userName": "alice123", "_id": OID}) == {"_id": {"$oid": str(OID)}}
    assert key_of({"_id": {"b": 1, "a": 2}}) == {"_id": {"b": 1, "a": 2}}


def test_positions_and_tokens() -> None:
    ts = Timestamp(1_700_000_000, 5)
    assert positions.timestamp(positions.position(ts)) == ts
    assert positions.position(Timestamp(2, 0)) > positions.position(Timestamp(1, 99))
    real = {"_data": "8265A0B1C2000000052B022C0100296E5A1004"}
    assert positions.token_position(real) == (0x65A0B1C2 << 32) | 5
    assert positions.token_position({"_data": "6b0cba5500000002"}) == 0x6B0CBA5500000002
    assert positions.token_position({"_data": "zz"}) is None
    assert positions.token_position(None) is None
    stored = positions.token_to_json({"_data": Binary(b"\x01", 0)})
    restored = positions.token_from_json(orjson.loads(orjson.dumps(stored)))
    assert bson.encode(restored) == bson.encode({"_data": Binary(b"\x01", 0)})  # same BSON
    entry = positions.stream_entry({"_data": "6b0cba5500000002"}, None)
    assert entry["cluster_time"] == 0x6B0CBA5500000002 and entry["at"].endswith("Z")


def test_history_notes_are_bounded() -> None:
    entry: dict[str, Any] = {}
    for n in range(8):
        positions.add_history_lost(entry, {"n": n})
    assert [note["n"] for note in entry["history_lost"]] == [3, 4, 5, 6, 7]


MIXED = [
    None,
    -1,
    2.5,
    Int64(3),
    "a",
    "b",
    {"k": 1},
    Binary(b"x"),
    OID,
    True,
    dt.datetime(2020, 1, 1),
]


def _matches(flt: dict[str, Any], value: Any) -> bool:
    """A tiny evaluator of the filters ``ranges`` writes, with MongoDB's type bracketing."""
    if "$and" in flt:
        return all(_matches(f, value) for f in flt["$and"])
    if "$or" in flt:
        return any(_matches(f, value) for f in flt["$or"])
    if not flt:
        return True
    cond = flt["_id"]
    if "$type" in cond:
        return any(name in ranges.BRACKETS[ranges.bracket(value)] for name in cond["$type"])
    ok = True
    for op, bound in cond.items():
        same = ranges.bracket(value) == ranges.bracket(bound)
        order = _rank(value) - _rank(bound)
        ok = ok and same and (order > 0 if op == "$gt" else order <= 0)
    return ok


def _rank(value: Any) -> int:
    """Position in ``MIXED``, which is in MongoDB's sort order (compared as exact BSON)."""
    return [ranges.encode(m) for m in MIXED].index(ranges.encode(value))


def test_a_null_id_is_a_boundary_not_an_open_side() -> None:
    plan = ranges.plan([None])
    assert plan[0]["hi"] == {"v": None} and plan[1]["lo"] == {"v": None}
    assert ranges.resume_filter(plan[0]) == {
        "$or": [{"_id": {"$lte": None}}, {"_id": {"$type": ["minKey"]}}]
    }


def test_ranges_cover_mixed_id_types_exactly_once() -> None:
    for every in (1, 2, 3, 4):
        plan = ranges.plan(ranges.boundaries(MIXED, every))
        hits = [sum(_matches(ranges.resume_filter(r), v) for r in plan) for v in MIXED]
        assert hits == [1] * len(MIXED), every


def test_ranges_resume_after_the_last_id() -> None:
    plan = ranges.plan([10], one_type=True)
    assert ranges.resume_filter(plan[0]) == {"_id": {"$lte": 10}}
    plan[1]["last"] = ranges.encode(Int64(15))
    assert ranges.resume_filter(plan[1]) == {"_id": {"$gt": 15}}
    assert type(ranges.resume_filter(plan[1])["_id"]["$gt"]) is Int64  # the type survives
    assert ranges.boundaries(list(range(10)), 4) == [3, 7]
    assert ranges.plan([]) == [
        {"lo": None, "hi": None, "last": None, "done": False, "one_type": False}
    ]


def test_stream_plans() -> None:
    one = plan_streams([("shop", "orders")], "auto")
    assert [s.id for s in one] == ["shop.orders"] and one[0].match() == []
    same_db = plan_streams([("shop", "orders"), ("shop", "users")], "auto")
    assert [s.id for s in same_db] == ["shop"]
    assert {"ns.coll": {"$in": ["orders", "users"]}} in same_db[0].match()[0]["$match"]["$or"]
    many = plan_streams([("a", "x"), ("b", "y")], "auto")
    assert [s.id for s in many] == ["*"] and many[0].db is None
    assert {"ns.db": "b", "ns.coll": "y"} in many[0].match()[0]["$match"]["$or"]
    forced = plan_streams([("a", "x"), ("a", "y")], "collection")
    assert [s.id for s in forced] == ["a.x", "a.y"]


@pytest.mark.parametrize(
    ("mode", "entry", "snapshot"),
    [
        ("initial", {}, True),
        ("never", {}, False),
        ("when_needed", {}, True),
        ("always", {}, True),
        ("initial", {"streams": {"a": {}}}, False),
        ("when_needed", {"streams": {"a": {}}}, False),
        ("always", {"streams": {"a": {}}}, True),
        ("always", {"streams": {"a": {}}, "snapshot": {"x": 1}}, False),  # resumed instead
    ],
)
def test_snapshot_decisions(mode: str, entry: dict[str, Any], snapshot: bool) -> None:
    assert (decide(mode, entry) is not None) is snapshot


def test_published_schema_grows_and_compares_as_json() -> None:
    tracker = FieldTracker("mongodb")
    first = tracker.observe(("db", "c"), [{"_id": 1, "a": 1}])
    assert first is not None and [c.name for c in first.columns] == ["_id", "a"]
    assert first.key_columns == ["_id"]
    assert tracker.observe(("db", "c"), [{"_id": 2, "a": 2}, None]) is None
    wider = tracker.observe(("db", "c"), [{"_id": 3, "b": {"x": 1}}])
    assert wider is not None and [c.name for c in wider.columns] == ["_id", "a", "b"]
    restarted = FieldTracker("mongodb")
    restarted.restore(wider)
    assert restarted.observe(("db", "c"), [{"_id": 4}]) is None
    row = {"_id": {"$oid": str(OID)}, "a": {"$numberDecimal": "1.0"}, "b": "text"}
    assert canonical_row(row, wider) == row  # sinks' values compare as the JSON they are


def test_config() -> None:
    config = MongoSourceConfig.model_validate(
        {"type": "mongodb", "dsn": "mongodb://u:p@h/", "tables": ["shop.orders"]}
    )
    assert config.full_document == "updateLookup" and config.collections() == [("shop", "orders")]
    assert "p@" not in repr(config)
    with pytest.raises(ValueError, match="mongodb://"):
        MongoSourceConfig.model_validate({"dsn": "postgres://h/", "tables": ["a.b"]})


def test_errors_are_classified() -> None:
    where = "mongodb://u:***@h/"
    lost = OperationFailure("history", 286, {"codeName": "ChangeStreamHistoryLost"})
    assert errors.cannot_resume(lost)
    assert errors.cannot_resume(OperationFailure("x", 280))
    assert errors.cannot_resume(OperationFailure('Unknown error: For input string: "zz"'))
    assert not errors.cannot_resume(OperationFailure("other", 2))
    standalone = OperationFailure(
        "The $changeStream stage is only supported on replica sets", 40573
    )
    message = str(errors.translate(standalone, where, "opening a change stream"))
    assert "replica set" in message and "--replSet" in message
    down = errors.translate(ServerSelectionTimeoutError("no servers"), where, "connecting")
    assert isinstance(down, SourceUnavailable) and where in str(down)
    denied = errors.translate(OperationFailure("auth failed", 18), where, "connecting")
    assert isinstance(denied, SourceFatal)
    assert re.search("refused access", str(denied))


def test_decimal128_digits_match_the_driver() -> None:
    import random

    rng = random.Random(5)
    values = ["0", "-0", "0E+10", "1E-6176", "-1.50", "NaN", "-Infinity", "123E-3"]
    values.append("9.999999999999999999999999999999999E+6144")
    for _ in range(2000):
        digits = rng.randrange(10 ** rng.randrange(1, 35))
        values.append(f"{rng.choice(['', '-'])}{digits}E{rng.randrange(-6000, 6000)}")
    for text in values:
        value = Decimal128(text)
        assert to_json(value) == {"$numberDecimal": str(value)}, text


def test_pipeline_file_errors_are_reported_together_with_their_paths() -> None:
    from cdc.config.pipeline import parse
    from cdc.contracts.errors import ConfigError

    text = (
        "version: 1\nname: bad\nsource:\n  type: mongodb\n  dsn: http://user:pw@x/\n"
        "  tables: [nodot]\n  full_document: whenever\n  snapshot_workers: 0\n"
    )
    with pytest.raises(ConfigError) as failure:
        parse(text, env={})
    paths = [path for path, _ in failure.value.problems]
    assert paths == [
        "source.tables",
        "source.dsn",
        "source.full_document",
        "source.snapshot_workers",
    ]
    assert "pw" not in str(failure.value)


def test_signal_collection_and_status_mirror() -> None:
    from connectors.mongodb import snapshot

    base = {"type": "mongodb", "dsn": "mongodb://h/", "tables": ["shop.orders"]}
    config = MongoSourceConfig.model_validate(base | {"signal_collection": "shop.signals"})
    assert config.watched() == [("shop", "orders"), ("shop", "signals")]
    with pytest.raises(ValueError, match=r"db\.collection"):
        MongoSourceConfig.model_validate(base | {"signal_collection": "signals"})
    state = snapshot.new_state("s1", 5, "why", {"shop.orders": ranges.plan([10, 20])}, "r1")
    state["collections"]["shop.orders"]["ranges"][1]["done"] = True
    view = snapshot.mirror({"snapshot": state})["snapshot"]
    table = view["tables"]["shop.orders"]
    assert (table["chunks_total"], table["done"], table["kind"]) == (3, [[1, 1]], "blocking")
    finished = {"last_snapshot": {"rows": {"shop.orders": 7}, "request": "r1"}}
    view = snapshot.mirror(finished | {"finished_requests": ["r1"]})["snapshot"]
    assert view["finished"] == ["r1"]
    assert view["tables"]["shop.orders"]["rows"] == 7
    assert snapshot.mirror({}) == {}
