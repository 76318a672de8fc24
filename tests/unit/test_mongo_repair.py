"""``cdc verify --repair`` on MongoDB without a server: verify's canonical keys turned back into
``_id`` values, the repair request's checks, and the deletes of the ``_id`` values not found."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
import pytest
from bson import Binary, Decimal128, Int64, ObjectId
from bson.datetime_ms import DatetimeMS

from cdc.contracts.errors import ConfigError
from cdc.contracts.events import Op
from cdc.records.normalize import canonical
from connectors.mongodb import MongoSourceConfig, MongoSourcePlugin, repair, snapshot
from connectors.mongodb.config import MongoTableEntry
from connectors.mongodb.convert import to_json
from connectors.mongodb.filters import compile_filter
from connectors.mongodb.snapshot import Batch
from connectors.mongodb.snapshot_rows import events, repaired

OID = ObjectId("65a0c0ffee00000000000001")
#: ``_id`` values of every kind a collection may hold.
IDS: list[Any] = [
    5,
    Int64(2**40),
    -3,
    "5",
    "c1",
    "",
    "007",
    1.5,
    1e16,
    True,
    None,
    OID,
    Decimal128("1.10"),
    dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=dt.UTC),
    Binary(b"\x00\xff", 4),
    {"tenant": 1, "n": "a"},
    DatetimeMS(253402300800000),  # year 10000: past Python's datetime, decoded as DatetimeMS
]


def verify_key(doc_id: Any) -> dict[str, Any]:
    """The key ``cdc verify`` reports for the document whose ``_id`` is ``doc_id``: the canonical
    form of the row's ``_id`` (relaxed Extended JSON, schemaless column type ``""``), as verify
    writes it: its JSON with every object's fields sorted (``cdc.verify.compare``)."""
    key = {"_id": canonical(to_json(doc_id), "")}
    return orjson.loads(orjson.dumps(key, option=orjson.OPT_SORT_KEYS))  # type: ignore[no-any-return]


@pytest.mark.parametrize("doc_id", IDS, ids=repr)
def test_every_id_is_among_the_candidates_of_its_verify_key(doc_id: Any) -> None:
    # Told apart as the sinks tell keys apart: by the record key's JSON (an Int64 and an int
    # of one value are one key, and one `$in` value matches both).
    candidates = repair.candidates(verify_key(doc_id))
    assert repair.identity(doc_id) in {repair.identity(v) for v in candidates}


def test_a_key_stands_for_its_own_value_alone_its_json_type_kept() -> None:
    # verify keeps a schemaless value's JSON type: the string "5" is not the number 5.
    assert verify_key("5") != verify_key(5) != verify_key(True) != verify_key(5.5)
    for value in ("5", "-3", "1.5", "True", "007", "c1", "", str(2**70), 5, -3, 1.5, True, None):
        assert repair.candidates({"_id": value}) == [value], value
        assert type(repair.candidates({"_id": value})[0]) is type(value)


def test_a_document_key_is_read_back_as_its_bson_value() -> None:
    assert repair.candidates({"_id": {"$oid": str(OID)}}) == [OID]
    (when,) = repair.candidates({"_id": {"$date": "2024-01-02T03:04:05.123Z"}})
    assert when == dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=dt.UTC)
    assert repair.candidates({"_id": {"$numberDecimal": "1.10"}}) == [Decimal128("1.10")]
    assert repair.candidates({"_id": {"a": 1, "b": "x"}}) == [{"a": 1, "b": "x"}]


@pytest.mark.parametrize(
    "key",
    [{"id": "x"}, {"_id": 1, "other": 2}, {}, {"_id": [1, 2]}, {"_id": {"$oid": "zz"}}],
    ids=repr,
)
def test_what_is_no_mongodb_key_is_refused(key: dict[str, Any]) -> None:
    with pytest.raises(repair.BadKey):
        repair.candidates(key)


def test_request_ids_are_exact_texts_per_key_once_each() -> None:
    keys = [{"_id": "5"}, {"_id": "5"}, {"_id": 5}, {"_id": {"$oid": str(OID)}}]
    ids = repair.request_ids(keys)
    assert [[repair.decode(t) for t in group] for group in ids] == [["5"], [5], [OID]]
    assert repair.query(ids) == {"_id": {"$in": ["5", 5, OID]}}
    # A request an earlier version stored holds several values for a key: still well formed.
    assert repair.well_formed([[repair.encode("5"), repair.encode(5)]])
    assert repair.well_formed(ids) and repair.well_formed([])
    assert not repair.well_formed(["5"]) and not repair.well_formed([[5]])
    # The exact BSON type survives the texts (an Int64 stays one, a date keeps its instant).
    assert type(repair.decode(repair.encode(Int64(3)))) is Int64


def config(**extra: Any) -> MongoSourceConfig:
    base = {
        "type": "mongodb",
        "dsn": "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100",
        "tables": ["shop.orders", {"name": "shop.users", "mask": {"_id": "hash"}}],
        "signal_collection": "shop.signals",
        "mask_key": "k" * 32,
    }
    return MongoSourceConfig.model_validate(base | extra)


def refused(source: MongoSourceConfig, table: str, keys: list[Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as failure:
        MongoSourcePlugin.request_repair(source, "p", table, keys)
    return list(failure.value.problems)


def test_a_repair_request_is_checked_before_anything_is_written() -> None:
    # Each refusal comes before any connection: the config's server does not exist.
    (problem,) = refused(config(signal_collection=None), "shop.orders", [{"_id": "1"}])
    assert problem[0] == "source.signal_collection" and "repair keys" in problem[1]
    (problem,) = refused(config(), "shop.other", [{"_id": "1"}])
    assert problem == ("--table", "'shop.other' is not a captured collection")
    (problem,) = refused(config(), "shop.users", [{"_id": "1"}])
    assert problem[0] == "--table" and "hashes _id" in problem[1]
    (problem,) = refused(config(), "shop.orders", [{"_id": "1"}, {"key": "1"}])
    assert problem[0] == "keys" and '{"key":"1"}' in problem[1]
    never_read = config(tables=[{"name": "shop.orders", "ops": ["c", "u", "d"]}])
    (problem,) = refused(never_read, "shop.orders", [{"_id": "1"}])
    assert "never snapshotted" in problem[1]


def repair_state(ids: list[str]) -> dict[str, Any]:
    state = snapshot.new_state("s", 42, "why", {"shop.orders": snapshot.repair_plan()}, "r1")
    snapshot.add_repair(state, "shop.orders", ids)
    return state


def test_the_keys_none_of_whose_ids_was_read_become_deletes_once_the_range_is_read() -> None:
    keys = [{"_id": "5"}, {"_id": {"$oid": str(OID)}}, {"_id": "9"}, {"_id": "7"}]
    state, found = repair_state(repair.request_ids(keys)), set[bytes]()
    first = repaired(Batch("shop.orders", 0, [{"_id": 5, "v": 1}], False), state, found)
    assert first == []  # not before the whole range was read
    last = repaired(Batch("shop.orders", 0, [{"_id": OID}, {"_id": "7"}], True), state, found)
    # The number 5 is another document than the string "5", which is gone: deleted.
    assert [(e.op, e.key) for e in last] == [(Op.DELETE, {"_id": "5"}), (Op.DELETE, {"_id": "9"})]
    assert {e.source.position for e in last} == {42}
    assert all(e.before is None and e.after is None for e in last)


def test_a_key_stored_with_several_values_is_deleted_only_when_none_was_read() -> None:
    # A request stored by an earlier version, whose verify wrote 5 and "5" alike, holds both.
    state = repair_state(
        [[repair.encode("5"), repair.encode(5)], [repair.encode("6"), repair.encode(6)]]
    )
    deletes = repaired(Batch("shop.orders", 0, [{"_id": 5, "v": 1}], True), state, set())
    assert sorted((e.op, str(e.key)) for e in deletes) == [
        (Op.DELETE, "{'_id': '6'}"),
        (Op.DELETE, "{'_id': 6}"),
    ]


def test_a_document_id_is_queried_field_by_field() -> None:
    ids = repair.request_ids([{"_id": {"n": "a", "t": {"y": 2, "x": 1}}}, {"_id": "5"}])
    assert repair.query(ids) == {
        "$or": [{"_id": {"$in": ["5"]}}, {"_id.n": "a", "_id.t.y": 2, "_id.t.x": 1}]
    }
    assert repair.query(repair.request_ids([{"_id": "5"}, {"_id": 5}])) == {
        "_id": {"$in": ["5", 5]}
    }


def test_a_key_left_out_by_the_row_filter_is_swept() -> None:
    where = compile_filter(
        MongoTableEntry.model_validate({"name": "shop.orders", "where": {"v": {"$gt": 0}}}),
        None,
        False,
    )
    state = repair_state(repair.request_ids([{"_id": 5}, {"_id": "5"}, {"_id": 6}]))
    state["collections"]["shop.orders"]["sweep"] = True
    docs = [{"_id": 5, "v": 1}, {"_id": "5", "v": -1}, {"_id": 6, "v": -1}]
    batch = Batch("shop.orders", 0, docs, True)
    reads, _ = events(batch, state, where)
    assert [(e.op, e.key) for e in reads] == [(Op.READ, {"_id": 5})]  # deletes wait: repaired
    deletes = repaired(batch, state, set(), where)
    # "5" and 6 are left out by the filter (5 passes): each is deleted from the sinks.
    assert sorted((e.op, str(e.key)) for e in deletes) == [
        (Op.DELETE, "{'_id': '5'}"),
        (Op.DELETE, "{'_id': 6}"),
    ]


def test_a_repair_is_one_range_read_again_whole_and_shown_as_such() -> None:
    state = repair_state(repair.request_ids([{"_id": "1"}]))
    info = state["collections"]["shop.orders"]
    assert [r.get("restart") for r in info["ranges"]] == [True]
    assert info["sweep"] is True and info["ids"] == repair.request_ids([{"_id": "1"}])
    assert info["ids"] == [[repair.encode("1")]]
    table = snapshot.mirror({"snapshot": state})["snapshot"]["tables"]["shop.orders"]
    assert (table["kind"], table["method"], table["request"]) == ("blocking", "_id keys", "r1")
    plain = snapshot.new_state("s", 42, "why", {"shop.orders": snapshot.repair_plan()}, None)
    assert repaired(Batch("shop.orders", 0, [], True), plain, set()) == []
