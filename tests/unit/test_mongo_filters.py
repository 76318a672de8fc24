"""MongoDB filters without a server: the query evaluator (type brackets, dotted paths, arrays,
each operator, refused ones), the stream stages, projections and masks on documents and on
``updateDescription``, the row-filter decision, the row editor transforms use, and the config
errors with their YAML paths."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from dataclasses import replace
from decimal import Decimal
from typing import Any

import orjson
import pytest
import structlog
from bson import Binary, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS

from cdc.config import pipeline as cdc_config
from cdc.contracts.errors import ConfigError
from cdc.contracts.events import ChangeEvent, Op
from cdc.envelope.json_rows import EncodedRow
from cdc.transforms.chain import build_chain
from cdc.transforms.fields import AddFieldConfig, RenameFieldsConfig
from cdc.transforms.route import RouteConfig
from connectors.mongodb import changes, records
from connectors.mongodb.config import MongoSourceConfig, MongoTableEntry
from connectors.mongodb.doctor import row_filters
from connectors.mongodb.filters import (
    CollectionFilter,
    collection_filters,
    compile_filter,
    mask_text,
    stream_stages,
)
from connectors.mongodb.match import (
    MISSING,
    QueryError,
    compare,
    compile_query,
    equal,
    from_extended_json,
    prefixed,
    resolve,
)
from connectors.mongodb.tables import resnapshot_due, without_reads

KEY = b"k" * 32
OID = ObjectId("65a000000000000000000001")


def matches(query: dict[str, Any], doc: dict[str, Any]) -> bool:
    return compile_query(from_extended_json(query))(doc)


def hashed(text: str) -> str:
    return hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()


# -- the evaluator ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [5, 5.0, Int64(5), Decimal128("5"), Decimal128("5.00")],
)
def test_numbers_of_every_type_are_equal_by_value(value: Any) -> None:
    assert matches({"a": 5}, {"a": value})
    assert matches({"a": {"$eq": Decimal128("5.0")}}, {"a": value})
    assert matches({"a": {"$gte": 4.5, "$lt": Int64(6)}}, {"a": value})
    assert not matches({"a": {"$gt": 5}}, {"a": value})


def test_type_brackets_keep_comparisons_apart() -> None:
    # A string, a bool, null and a date are never greater or less than a number.
    for value in ("9", True, None, dt.datetime(2030, 1, 1, tzinfo=dt.UTC), OID, [], {"x": 1}):
        assert not matches({"a": {"$gt": 1}}, {"a": value}), value
        assert not matches({"a": {"$lt": 1}}, {"a": value}), value
    assert matches({"a": {"$ne": 1}}, {"a": "1"})  # "1" is not 1
    assert not matches({"a": 1}, {"a": True})  # a bool is not a number
    assert not matches({"a": True}, {"a": 1})
    assert matches({"a": {"$gt": False}}, {"a": True})
    assert matches({"a": {"$gt": "abc"}}, {"a": "abd"})
    assert not matches({"a": {"$gt": "abc"}}, {"a": 100})
    assert matches({"a": {"$lt": "é"}}, {"a": "z"})  # code point order, as the server's bytes


def test_dates_objectids_and_timestamps() -> None:
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
    doc = {"d": when, "ms": DatetimeMS(when), "o": OID, "t": Timestamp(5, 6)}
    assert matches({"d": {"$gte": {"$date": "2024-01-02T03:04:05.123Z"}}}, doc)
    # To the millisecond, as BSON stores it; and a DatetimeMS is the same date.
    assert matches({"d": {"$date": "2024-01-02T03:04:05.123Z"}}, doc)
    assert matches({"ms": {"$date": "2024-01-02T03:04:05.123Z"}}, doc)
    assert matches({"d": {"$lt": dt.date(2024, 1, 3)}}, doc)  # a YAML date: midnight UTC
    assert matches({"d": {"$gt": dt.datetime(2024, 1, 2)}}, doc)  # a YAML time without zone
    assert matches({"o": {"$oid": str(OID)}}, doc)
    assert matches({"o": {"$gt": {"$oid": "65a000000000000000000000"}}}, doc)
    assert not matches({"o": str(OID)}, doc)  # a string is not an ObjectId
    assert matches({"t": {"$gt": Timestamp(5, 5)}}, doc)
    assert matches({"n": {"$numberDecimal": "1.50"}}, {"n": 1.5})
    assert matches({"n": {"$numberLong": "7"}}, {"n": 7})


def test_null_and_missing() -> None:
    assert matches({"a": None}, {})
    assert matches({"a": None}, {"a": None})
    assert not matches({"a": None}, {"a": 0})
    assert matches({"a": {"$ne": None}}, {"a": 0})
    assert not matches({"a": {"$ne": None}}, {})
    assert matches({"a": {"$gte": None}}, {}) and matches({"a": {"$lte": None}}, {"a": None})
    assert not matches({"a": {"$gt": None}}, {"a": None})
    assert matches({"a": {"$in": [None, 3]}}, {})
    assert matches({"a": {"$exists": False}}, {}) and not matches({"a": {"$exists": True}}, {})
    assert matches({"a": {"$exists": True}}, {"a": None})


def test_dotted_paths_and_arrays() -> None:
    doc = {
        "tags": ["x", "y", 3],
        "items": [{"sku": "a", "n": 2}, {"sku": "b", "n": 9}, {"other": 1}],
        "address": {"city": "Oslo", "geo": {"lat": 59.9}},
        "matrix": [[1, 2], [3]],
    }
    assert matches({"tags": "y"}, doc)  # an array holding the value
    assert matches({"tags": ["x", "y", 3]}, doc)  # or equal to it
    assert not matches({"tags": ["y", "x", 3]}, doc)  # order matters
    assert matches({"tags": {"$gt": 2}}, doc)  # any element
    assert matches({"items.sku": "b"}, doc)
    assert matches({"items.n": {"$gt": 5}}, doc)
    assert not matches({"items.n": {"$gt": 9}}, doc)
    assert matches({"items.sku": None}, doc)  # the third item has no sku
    assert matches({"items.1.sku": "b"}, doc) and not matches({"items.0.sku": "b"}, doc)
    assert matches({"tags.0": "x"}, doc)
    assert matches({"address.city": "Oslo", "address.geo.lat": {"$lt": 60}}, doc)
    assert matches({"address": {"city": "Oslo", "geo": {"lat": 59.9}}}, doc)
    assert not matches({"address": {"geo": {"lat": 59.9}, "city": "Oslo"}}, doc)  # field order
    assert matches({"matrix": [3]}, doc)  # an element equal to the array
    assert not matches({"matrix": 3}, doc)  # arrays inside arrays are not searched
    # The server's own cases (jstests/core/null2.js): documents without the field count as
    # null, other elements do not.
    for value, found in [([{"b": 5}], False), ([{}], True), ([], False), ([5, {"b": 5}], False)]:
        assert matches({"a.b": None}, {"a": value}) is found, value
    assert matches({"a.b": None}, {"a": 5})
    assert resolve({"a": [{"b": 1}, {"c": 2}]}, ["a", "b"]) == [1, MISSING]


def test_logical_and_negation_operators() -> None:
    doc = {"tenant": 42, "deleted": False, "score": 7}
    assert matches({"tenant": 42, "deleted": {"$ne": True}}, doc)
    assert matches({"$or": [{"tenant": 1}, {"score": {"$gte": 7}}]}, doc)
    assert not matches({"$and": [{"tenant": 42}, {"score": {"$lt": 7}}]}, doc)
    assert matches({"$nor": [{"tenant": 1}, {"deleted": True}]}, doc)
    assert matches({"score": {"$not": {"$gt": 10}}}, doc)
    assert matches({"missing": {"$not": {"$gt": 10}}}, doc)  # $not matches a missing field
    assert matches({"score": {"$in": [1, 7.0]}, "tenant": {"$nin": [1, 2]}}, doc)
    assert not matches({"tenant": {"$nin": [42]}}, doc)
    assert matches({"tags": {"$nin": ["z"]}}, {"tags": ["x"]})
    assert not matches({"tags": {"$nin": ["x"]}}, {"tags": ["x", "y"]})


def test_nan_compares_as_the_server_does() -> None:
    nan = {"a": float("nan")}
    assert matches({"a": float("nan")}, nan) and matches({"a": Decimal128("NaN")}, nan)
    assert not matches({"a": {"$gt": 4}}, nan) and not matches({"a": {"$lt": 4}}, nan)
    assert matches({"a": {"$gte": float("nan")}}, nan)
    assert compare(float("nan"), -1e308) < 0


def test_bson_order_of_documents_arrays_and_brackets() -> None:
    assert compare(None, 0) < 0 < compare("a", 0)  # null < numbers < strings
    assert compare({"a": 1}, "z") > 0 and compare([1], {"a": 1}) > 0
    assert compare(Binary(b"\x01"), [1]) > 0 and compare(OID, b"x") > 0
    assert compare(True, OID) > 0 and compare(dt.datetime.now(dt.UTC), True) > 0
    assert compare(MinKey(), None) < 0 and compare(MaxKey(), Regex("a")) > 0
    assert compare({"a": 1, "b": 2}, {"a": 1}) > 0
    assert compare({"a": 1}, {"b": 0}) < 0
    assert compare([1, 2], [1, 3]) < 0 and compare([1, 2], [1]) > 0
    assert equal(Decimal("1.0"), 1) and not equal("1", 1)
    assert matches({"d": {"$gt": {"a": 1}}}, {"d": {"a": 2}})


@pytest.mark.parametrize(
    ("query", "where"),
    [
        ({"name": {"$regex": "^a"}}, "name.$regex"),
        ({"$expr": {"$gt": ["$a", 1]}}, "$expr"),
        ({"$where": "this.a > 1"}, "$where"),
        ({"tags": {"$elemMatch": {"$gt": 1}}}, "tags.$elemMatch"),
        ({"tags": {"$size": 2}}, "tags.$size"),
        ({"a": {"$type": "string"}}, "a.$type"),
        ({"$or": [{"a": 1}, {"b": {"$all": [1]}}]}, "$or.1.b.$all"),
        ({"a": {"$not": {"$mod": [2, 0]}}}, "a.$not.$mod"),
        ({"$text": {"$search": "x"}}, "$text"),
    ],
)
def test_unsupported_operators_are_refused_with_where(query: dict[str, Any], where: str) -> None:
    with pytest.raises(QueryError) as raised:
        compile_query(from_extended_json(query))
    assert raised.value.at == where
    assert "unsupported operator" in str(raised.value)


@pytest.mark.parametrize(
    "query",
    [
        {"a": Regex("^x")},
        {"a": {"b": {"$gt": 1}}},  # an operator inside a value
        {"a": {"$gt": 1, "b": 2}},  # operators mixed with fields
        {"$or": []},
        {"$and": {"a": 1}},
        {"a": {"$in": 5}},
        {"a": {"$in": [{"$gt": 1}]}},
        {"a": {"$not": 5}},
        {"a": {"$exists": "yes"}},
        {"a..b": 1},
        {"d": {"$date": "not a date"}},
    ],
)
def test_malformed_queries_are_refused(query: dict[str, Any]) -> None:
    with pytest.raises(QueryError):
        compile_query(from_extended_json(query))


def test_prefixed_query_for_change_events() -> None:
    query = {"tenant": 42, "$or": [{"a.b": 1}, {"c": {"$ne": 2}}]}
    assert prefixed(query, "fullDocument") == {
        "fullDocument.tenant": 42,
        "$or": [{"fullDocument.a.b": 1}, {"fullDocument.c": {"$ne": 2}}],
    }
    event = {"operationType": "insert", "fullDocument": {"tenant": 42, "a": {"b": 1}}}
    assert compile_query(prefixed(query, "fullDocument"))(event)


# -- documents, keys, updateDescription ---------------------------------------------------------


def table_filter(pre_images: bool = False, **entry: Any) -> CollectionFilter:
    valid = MongoTableEntry.model_validate({"name": "shop.users", **entry})
    return compile_filter(valid, KEY, pre_images)


USERS = table_filter(
    columns={"exclude": ["password_hash"]},
    mask={"email": "hash", "ssn": "redact", "phone": {"type": "keep_last", "n": 4}, "notes": None},
    where={"tenant_id": 42, "deleted": {"$ne": True}},
)
DOC = {
    "_id": OID,
    "tenant_id": 42,
    "email": "ada@example.com",
    "password_hash": "PWHASH-SECRET",
    "ssn": 123456789,
    "phone": "+47 555 1234",
    "notes": {"private": "x"},
    "name": "Ada",
}


def test_mask_text_is_a_string_or_compact_relaxed_json() -> None:
    assert mask_text("ada@example.com") == "ada@example.com"
    assert mask_text(42) == "42" and mask_text(1.5) == "1.5" and mask_text(True) == "true"
    assert mask_text(OID) == '{"$oid":"65a000000000000000000001"}'
    assert mask_text(Int64(7)) == "7"
    assert mask_text(dt.datetime(2024, 1, 2, tzinfo=dt.UTC)) == '{"$date":"2024-01-02T00:00:00Z"}'
    assert mask_text(["a", 1, {"k": Decimal128("1.5")}]) == '["a",1,{"k":{"$numberDecimal":"1.5"}}]'


def test_document_projection_and_masks() -> None:
    out = USERS.document(DOC)
    assert list(out) == ["_id", "tenant_id", "email", "ssn", "phone", "notes", "name"]
    assert out["email"] == hashed("ada@example.com")
    assert out["ssn"] == "***"  # a number is masked through its text
    assert out["phone"] == "********1234"
    assert out["notes"] is None
    assert out["_id"] == OID and out["name"] == "Ada"
    assert USERS.document({"_id": 1, "email": None})["email"] is None  # null stays null
    assert DOC["password_hash"] == "PWHASH-SECRET"  # the document itself is untouched
    include = table_filter(columns={"include": ["email"]}, mask={"email": "redact"})
    assert include.document(DOC) == {"_id": OID, "email": "***"}  # _id is always kept
    assert include.projection() == {"_id": 1, "email": 1}
    assert USERS.projection() == {"password_hash": 0}
    # The server keeps what the row filter reads; the source decides on it, then drops it.
    on_left_out = table_filter(columns={"exclude": ["tenant", "pw"]}, where={"tenant.id": 1})
    assert on_left_out.projection() == {"pw": 0} and on_left_out.excluded() == ["pw"]
    assert on_left_out.document({"_id": 1, "tenant": {"id": 1}, "pw": "x", "a": 2}) == {
        "_id": 1,
        "a": 2,
    }
    narrow = table_filter(columns={"include": ["a"]}, where={"$or": [{"b": 1}, {"c.d": 2}]})
    assert narrow.projection() == {"_id": 1, "a": 1, "b": 1, "c": 1}
    assert narrow.document({"_id": 1, "a": 1, "b": 1, "c": {"d": 2}}) == {"_id": 1, "a": 1}


def test_hashed_key_is_the_hash_of_the_id_text_everywhere() -> None:
    keyed = table_filter(mask={"_id": "hash"})
    expected = hashed('{"$oid":"65a000000000000000000001"}')
    assert keyed.key(OID) == {"_id": expected}
    assert keyed.document({"_id": OID, "a": 1}) == {"_id": expected, "a": 1}
    assert keyed.key("sku-1") == {"_id": hashed("sku-1")} and keyed.masked_key
    assert table_filter(mask={"email": "hash"}).key(OID) == {"_id": {"$oid": str(OID)}}


def test_update_description_loses_left_out_and_masked_paths() -> None:
    description = {
        "updatedFields": {
            "password_hash": "NEW-SECRET",
            "password_hash.salt": "SALT-SECRET",
            "email": "new@example.com",
            "email.domain": "example.com",
            "name": "Ada L.",
            "address.city": "Oslo",
        },
        "removedFields": ["password_hash.old", "phone", "nickname"],
        "truncatedArrays": [
            {"field": "password_hash.x", "newSize": 1},
            {"field": "phone", "newSize": 2},
            {"field": "tags", "newSize": 3},
        ],
        "disambiguatedPaths": {"password_hash.0": ["password_hash", "0"]},
    }
    out = USERS.update_description(description)
    assert out["updatedFields"] == {
        "email": hashed("new@example.com"),
        "name": "Ada L.",
        "address.city": "Oslo",
    }
    assert out["removedFields"] == ["phone", "nickname"]
    assert out["truncatedArrays"] == [{"field": "tags", "newSize": 3}]
    assert "disambiguatedPaths" not in out
    text = orjson.dumps(
        records.update_description({"operationType": "update", "updateDescription": out})
    )
    assert b"SECRET" not in text and b"new@example.com" not in text


def test_scrubbed_change_for_a_dead_letter_holds_no_raw_value() -> None:
    keyed = table_filter(
        columns={"exclude": ["password_hash"]}, mask={"_id": "hash", "email": "hash"}
    )
    change = {
        "operationType": "update",
        "documentKey": {"_id": "user-SECRET-ID"},
        "fullDocument": DOC | {"_id": "user-SECRET-ID"},
        "updateDescription": {"updatedFields": {"password_hash": "PWHASH-SECRET"}},
    }
    text = repr(keyed.scrub(change))
    for raw in ("user-SECRET-ID", "PWHASH-SECRET", "ada@example.com"):
        assert raw not in text


# -- the row-filter decision --------------------------------------------------------------------

IN = {"_id": 1, "tenant_id": 42}
OUT = {"_id": 1, "tenant_id": 7}


@pytest.mark.parametrize(
    ("kind", "new", "old", "expected"),
    [
        ("insert", IN, None, Op.CREATE),
        ("insert", OUT, None, None),
        ("update", IN, IN, Op.UPDATE),
        ("update", IN, OUT, Op.CREATE),  # move in
        ("update", OUT, IN, Op.DELETE),  # move out
        ("update", OUT, OUT, None),
        ("replace", IN, OUT, Op.CREATE),
        ("replace", OUT, IN, Op.DELETE),
        ("delete", None, IN, Op.DELETE),
        ("delete", None, OUT, None),
        # Without a pre-image: an update that does not match may have moved out.
        ("update", IN, None, Op.UPDATE),
        ("update", OUT, None, Op.DELETE),
        ("replace", OUT, None, Op.DELETE),
        ("delete", None, None, Op.DELETE),
        ("update", None, None, Op.UPDATE),  # the document is gone: the caller skips it
    ],
)
def test_row_filter_decision(kind: str, new: Any, old: Any, expected: Op | None) -> None:
    assert table_filter(where={"tenant_id": 42}).op(kind, new, old) is expected


def change(kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "_id": {"_data": "8200000001"},
        "operationType": kind,
        "clusterTime": Timestamp(1_700_000_000, 1),
        "ns": {"db": "shop", "coll": "users"},
        "documentKey": {"_id": OID},
    } | fields


def convert(event: dict[str, Any], where_filter: CollectionFilter = USERS) -> list[ChangeEvent]:
    filters = {("shop", "users"): where_filter}
    return changes.convert(event, {("shop", "users")}, 0, filters).events


def test_converted_changes_are_filtered_and_masked() -> None:
    created = convert(change("insert", fullDocument=DOC))
    assert [e.op for e in created] == [Op.CREATE]
    after = created[0].after
    assert isinstance(after, EncodedRow)
    assert b"PWHASH" not in after.json and b"ada@example.com" not in after.json
    assert b"password_hash" not in after.json
    assert after["email"] == hashed("ada@example.com") and after["phone"] == "********1234"
    assert convert(change("insert", fullDocument=DOC | {"tenant_id": 7})) == []
    assert convert(change("insert", fullDocument=DOC | {"deleted": True})) == []
    update = change(
        "update",
        fullDocument=DOC,
        updateDescription={"updatedFields": {"password_hash": "X-SECRET", "name": "B"}},
    )
    (updated,) = convert(update)
    assert updated.op is Op.UPDATE
    assert updated.fields["updateDescription"]["updatedFields"] == '{"name": "B"}'
    moved_out = convert(change("update", fullDocument=DOC | {"tenant_id": 7}))
    assert [(e.op, e.before, e.after, e.key) for e in moved_out] == [
        (Op.DELETE, None, None, {"_id": {"$oid": str(OID)}})
    ]
    assert moved_out[0].fields["updateDescription"] is None
    (deleted,) = convert(change("delete"))
    assert deleted.op is Op.DELETE


def test_move_in_and_out_with_pre_images() -> None:
    exact = replace(USERS, pre_images=True)
    old, new = DOC | {"tenant_id": 7}, DOC
    (moved_in,) = convert(change("update", fullDocument=new, fullDocumentBeforeChange=old), exact)
    assert moved_in.op is Op.CREATE and moved_in.before is None
    assert moved_in.fields["updateDescription"] is None
    (moved_out,) = convert(change("update", fullDocument=old, fullDocumentBeforeChange=new), exact)
    assert moved_out.op is Op.DELETE and moved_out.after is None
    assert moved_out.before is not None and b"PWHASH" not in moved_out.before.json  # type: ignore[attr-defined]
    assert convert(change("update", fullDocument=old, fullDocumentBeforeChange=old), exact) == []
    assert convert(change("delete", fullDocumentBeforeChange=old), exact) == []
    (kept,) = convert(change("delete", fullDocumentBeforeChange=new), exact)
    assert kept.op is Op.DELETE and kept.before["email"] == hashed("ada@example.com")  # type: ignore[index]


def test_update_of_a_gone_document_is_left_out_with_a_masked_key() -> None:
    keyed = table_filter(mask={"_id": "hash"}, where={"tenant_id": 42})
    outcome = changes.convert(
        change("update", fullDocument=None), {("shop", "users")}, 0, {("shop", "users"): keyed}
    )
    assert outcome.events == []
    assert outcome.notice is not None and str(OID) not in repr(outcome.notice)


# -- stream stages ------------------------------------------------------------------------------


def test_stream_stages() -> None:
    users, orders = ("shop", "users"), ("shop", "orders")
    filters = {
        users: USERS,
        orders: table_filter(columns={"exclude": ["password_hash", "card"]}),
    }
    single = stream_stages([users], filters, True, True)
    assert single == [
        {
            "$match": {
                "$or": [
                    {"operationType": {"$nin": ["insert"]}},
                    {"fullDocument.tenant_id": 42, "fullDocument.deleted": {"$ne": True}},
                ]
            }
        },
        {
            "$project": {
                "fullDocument.password_hash": 0,
                "fullDocumentBeforeChange.password_hash": 0,
                "updateDescription.updatedFields.password_hash": 0,
            }
        },
    ]
    # mongo-java-server gets no $match (its matcher differs in corner cases).
    assert stream_stages([users], filters, True, False) == single[1:]
    # A database stream: other collections' events pass; only common exclusions go out.
    wide = stream_stages([users, orders, ("shop", "signals")], filters, False, True)
    assert len(wide) == 1 and wide[0]["$match"]["$or"][1] == {
        "$nor": [{"ns.db": "shop", "ns.coll": "users"}]
    }
    both = stream_stages([users, orders], filters, False, False)
    assert both == [
        {
            "$project": {
                f"{p}.password_hash": 0
                for p in (
                    "fullDocument",
                    "fullDocumentBeforeChange",
                    "updateDescription.updatedFields",
                )
            }
        }
    ]
    exact = {users: replace(USERS, pre_images=True)}
    match_stage = stream_stages([users], exact, True, True)[0]
    conditions = match_stage["$match"]["$or"]
    assert conditions[0] == {"operationType": {"$nin": ["insert", "update", "replace", "delete"]}}
    assert conditions[1]["$or"][1] == {
        "fullDocumentBeforeChange.tenant_id": 42,
        "fullDocumentBeforeChange.deleted": {"$ne": True},
    }
    plain = collection_filters([MongoTableEntry(name="shop.users")], None, False)
    assert plain == {} and stream_stages([users], plain, True, True) == []


# -- transforms through the row editor ----------------------------------------------------------


def _event(row: Any) -> ChangeEvent:
    (event,) = convert(
        change("insert", fullDocument={"_id": OID, "n": Int64(5), "email": "e"}),
        table_filter(mask={"email": "redact"}),
    )
    return event


def test_rename_and_add_field_keep_debeziums_string_document() -> None:
    event = _event(None)
    steps = [
        RenameFieldsConfig(fields={"email": "contact"}),
        AddFieldConfig(field="region", value="eu"),
    ]
    (changed,) = build_chain(steps, "p", ["shop.users"]).apply(event)
    after = changed.after
    assert isinstance(after, EncodedRow)
    text = orjson.loads(after.json)
    assert isinstance(text, str)  # still a JSON string holding the document
    assert text == (
        '{"_id": {"$oid": "65a000000000000000000001"},"n": {"$numberLong": "5"},'
        '"contact": "***","region": "eu"}'
    )
    assert after["contact"] == "***" and after["n"] == 5
    route = RouteConfig(match=r"shop\.users", topic="shop.people")
    (routed,) = build_chain([route], "p", ["shop.users"]).apply(event)
    assert isinstance(routed.after, EncodedRow)
    assert routed.after["__dbz__physicalTableIdentifier"] == "p.shop.users"
    assert '"__dbz__physicalTableIdentifier": "p.shop.users"' in orjson.loads(routed.after.json)


def test_row_editor_keeps_a_plain_row_plain() -> None:
    plain = {"_id": {"$oid": str(OID)}, "when": {"$date": "2024-01-02T00:00:00Z"}, "n": 1}
    edited = records.edit(plain, lambda row: {**row, "x": 1})
    assert edited == plain | {"x": 1}


# -- config -------------------------------------------------------------------------------------


def parse(tables: str, extra: str = "") -> Any:
    text = (
        "version: 1\nname: t\nsource:\n  type: mongodb\n  dsn: mongodb://h/\n"
        f"  tables:\n{tables}\n  mask_key: {'k' * 20}\n{extra}"
    )
    return cdc_config.parse(text, env={})


def problems(tables: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as raised:
        parse(tables)
    return dict(raised.value.problems)


def test_config_errors_carry_their_yaml_paths() -> None:
    found = problems(
        "    - shop.orders\n"
        "    - name: shop.users\n"
        '      where: "tenant_id = 42"\n'
        "    - name: shop.a\n"
        "      where: {name: {$regex: '^x'}}\n"
        "    - name: shop.b\n"
        "      columns: {exclude: [_id]}\n"
        "      mask: {_id: redact}\n"
        "    - name: shop.c\n"
        "      columns: {include: [a.b]}\n"
        "      mask: {$x: hash}"
    )
    assert "query document" in found["source.tables[1].where"]
    assert "$regex" in found["source.tables[2].where"]
    assert "cannot leave out _id" in found["source.tables[3].columns"]
    assert "may only be hashed" in found["source.tables[3].mask"]
    assert "top-level" in found["source.tables[4].columns"]
    assert "top-level" in found["source.tables[4].mask"]


def test_a_valid_filtered_config() -> None:
    pipeline = parse(
        "    - shop.orders\n"
        "    - name: shop.users\n"
        "      columns: {exclude: [password_hash]}\n"
        "      mask: {_id: hash, email: hash, phone: {type: keep_last, n: 4}, notes: null}\n"
        "      where: {tenant_id: 42, created: {$gte: 2024-01-01}, _id: {$ne: {$oid: "
        f"'{OID}'}}}}}}\n"
        "      ops: [c, u, d]"
    )
    source = pipeline.source
    assert isinstance(source, MongoSourceConfig)
    entry = source.table_entry("shop.users")
    assert isinstance(entry, MongoTableEntry) and not entry.allows("r")
    (users,) = collection_filters(source.tables, source.mask_key_bytes(), False).values()
    assert users.matches({"_id": 1, "tenant_id": 42, "created": dt.datetime(2024, 5, 1)})
    assert not users.matches({"_id": OID, "tenant_id": 42, "created": dt.datetime(2024, 5, 1)})
    assert without_reads(["shop.orders", "shop.users"], source, structlog.get_logger()) == [
        "shop.orders"
    ]


def test_doctor_warns_about_a_row_filter_without_pre_images() -> None:
    source = parse("    - name: shop.users\n      where: {tenant_id: 42}").source
    (check,) = row_filters(source)
    assert check.ok and check.warning and "delete" in check.detail
    assert "full_document: required" in (check.fix or "")
    exact = source.model_copy(update={"full_document": "required"})
    (check,) = row_filters(exact)
    assert check.ok and not check.warning


def test_resnapshot_is_planned_once_per_start() -> None:
    from cdc.contracts.source import SourceContext
    from cdc.runtime.fingerprints import OFFSET_KEY, current

    pipeline = parse("    - shop.orders\n    - name: shop.users\n      where: {a: 1}")
    source = pipeline.source
    logger = structlog.get_logger()
    context = SourceContext(
        "t",
        None,  # type: ignore[arg-type]
        logger,
        transforms=pipeline.chain(),
        resnapshot=("shop.users", "x.y"),
    )
    assert resnapshot_due(source, context, {}, [], logger) == ["shop.users"]
    assert resnapshot_due(source, context, {}, ["shop.users"], logger) == []  # read as added
    old = {OFFSET_KEY: {"transforms": "x", "tables": {}, "mask_key": None}}
    assert resnapshot_due(source, context, old, [], logger) == ["shop.users"]
    # An earlier session of this start stored the runtime's fingerprint with the planned
    # snapshot: a reconnect plans nothing again.
    assert resnapshot_due(source, context, {OFFSET_KEY: current(pipeline)}, [], logger) == []
