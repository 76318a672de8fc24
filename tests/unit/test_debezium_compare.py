"""The differential comparison itself: strict where it must be, and each deviation excuses only
what it names (tests/debezium/compare.py and the DEVIATIONS of the differential test)."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.debezium.compare import (
    Context,
    by_topic,
    compare_record,
    compare_topic,
    diff,
    key_payload,
    payload,
    summary,
)
from tests.debezium.differential import TOPICS
from tests.debezium.workload import envelope_block
from tests.integration.test_debezium_differential import DEVIATIONS, EXPECTED, UNAVAILABLE

TOPIC = "dbz.public.t"


def record(op: str | None, key: Any = None, **envelope: Any) -> dict[str, Any]:
    """A record of TOPIC: op None is a tombstone."""
    key = {"id": 1} if key is None else key
    if op is None:
        return {"topic": TOPIC, "key": key, "value": None}
    source = {"version": "3.6.1.Final", "ts_ms": 10, "snapshot": "false", "txId": 7, "lsn": 99}
    source.update(envelope.pop("source", {}))
    value = {"before": None, "after": {"id": 1}, "source": source, "op": op, "ts_ms": 5}
    value.update(envelope)
    return {"topic": TOPIC, "key": key, "value": value}


def paths(ours: dict[str, Any], theirs: dict[str, Any], context: Context | None = None) -> set[str]:
    context = context or Context(TOPIC, 0)
    return {d.path for d in compare_record(ours, theirs, DEVIATIONS, context)}


def test_numbers_bools_and_key_order_are_compared_strictly() -> None:
    assert diff({"a": 0}, {"a": 0.0}) == [("a", "type", 0, 0.0)]
    assert diff({"a": True}, {"a": 1}) == [("a", "type", True, 1)]
    assert diff({"a": 1, "b": 2}, {"b": 2, "a": 1}) == [
        ("(top)", "key order", ["a", "b"], ["b", "a"])
    ]
    assert diff({"a": 1}, {"b": 1}) == [("b", "missing", None, 1), ("a", "extra", 1, None)]


def test_connect_schema_fields_pair_by_name() -> None:
    ours = {"fields": [{"field": "a", "type": "int32"}, {"field": "b", "type": "string"}]}
    theirs = {"fields": [{"field": "a", "type": "int64"}, {"field": "b", "type": "string"}]}
    assert diff(ours, theirs) == [("fields.fields[a].type", "value", "int32", "int64")]


def test_a_missing_record_does_not_shift_the_others() -> None:
    theirs = [record("c"), record("u"), record("d"), record(None)]
    ours = [record("c"), record("d"), record(None)]
    found = compare_topic(TOPIC, ours, theirs, DEVIATIONS)
    assert [(d.index, d.kind) for d in found] == [(1, "record missing")]
    assert "1 difference(s)" in summary(found)


def test_wall_clock_and_version_are_excused_but_not_a_missing_field() -> None:
    ours, theirs = record("c", ts_ms=1), record("c", ts_ms=2, ts_us=2000)
    ours["value"]["source"]["version"] = "0.1.0"
    assert paths(ours, theirs) == {"value.ts_us"}


def test_snapshot_positions_are_excused_only_in_snapshot_rows() -> None:
    snap = {"snapshot": "true", "lsn": 1, "txId": 2, "ts_ms": 3}
    other = {"snapshot": "true", "lsn": 4, "txId": 5, "ts_ms": 6}
    assert paths(record("r", source=snap), record("r", source=other)) == set()
    # A null where Debezium has a number is still a difference (the shape is compared).
    assert paths(record("r", source={**snap, "txId": None}), record("r", source=other)) == {
        "value.source.txId"
    }
    streamed = paths(record("c", source={"lsn": 1}), record("c", source={"lsn": 2}))
    assert streamed == {"value.source.lsn"}


def test_a_source_pos_in_the_value_is_a_difference() -> None:
    # The position travels beside the value (the record's cdc.pos), never in it.
    ours = record("c", source={"pos": [99, 0]})
    assert paths(ours, record("c")) == {"value.source.pos"}
    schema = {"fields": [{"field": "source", "fields": [{"field": "lsn"}, {"field": "pos"}]}]}
    theirs_schema = {"fields": [{"field": "source", "fields": [{"field": "lsn"}]}]}
    wrapped = {"key": {"id": 1}, "value": {"schema": schema, "payload": record("c")["value"]}}
    theirs = {"key": {"id": 1}, "value": {"schema": theirs_schema, "payload": record("c")["value"]}}
    assert paths(wrapped, theirs) != set()


def test_unchanged_toast_must_be_the_rows_last_value() -> None:
    context = Context(TOPIC, 1, previous={'{"id": 1}': {"id": 1, "big": "x" * 100}})
    theirs = record("u", after={"id": 1, "big": UNAVAILABLE})
    assert paths(record("u", after={"id": 1, "big": "x" * 100}), theirs, context) == set()
    wrong = paths(record("u", after={"id": 1, "big": "y"}), theirs, context)
    assert wrong == {"value.after.big"}


def test_multi_dimensional_arrays_keep_their_rows_and_nothing_else() -> None:
    theirs = record("c", after={"id": 1, "m": [None, None]})
    assert paths(record("c", after={"id": 1, "m": [[1, 2], [3, 4]]}), theirs) == set()
    assert paths(record("c", after={"id": 1, "m": [1, 2]}), theirs) == {
        "value.after.m[0]",
        "value.after.m[1]",
    }
    # Rows, but not the ones the workload wrote.
    wrong = paths(record("c", after={"id": 1, "m": [[9, 9], [9, 9]]}), theirs)
    assert wrong == {"value.after.m[0]", "value.after.m[1]"}


def test_a_truncate_key_is_null_as_debeziums() -> None:
    theirs = record("t", after=None)
    theirs["key"] = None
    ours = copy.deepcopy(theirs)
    assert paths(ours, theirs) == set()
    ours["key"] = {}
    assert paths(ours, theirs) == {"key"}


def test_a_bare_record_against_a_wrapped_one_is_one_shape_difference_then_the_payload() -> None:
    theirs = record("c", after={"id": 1, "d": 19782})
    wrapped = {
        "key": {"schema": {}, "payload": {"id": 1}},
        "value": {"schema": {}, "payload": theirs["value"]},
    }
    found = compare_record(
        record("c", after={"id": 1, "d": "2024-02-29"}), wrapped, DEVIATIONS, Context(TOPIC, 0)
    )
    assert {(d.path, d.kind) for d in found} == {
        ("key", "shape"),
        ("value", "shape"),
        ("value.payload.after.d", "type"),
    }


def test_the_envelope_block_starts_from_debeziums_defaults() -> None:
    block = envelope_block("defaults")
    assert block["decimal.handling.mode"] == "precise"
    assert block["skipped.operations"] == "t"
    assert block["schemas.enable"] is True
    readable = envelope_block("readable")
    assert readable["time.precision.mode"] == "isostring"
    assert readable["schemas.enable"] is False
    assert not any("converter" in name for name in readable)


#: The 2-D array of each workload row by id (Debezium's files have one null per row instead).
ARRAYS = {1: [[1, 2], [3, 4]], 2: [[5, 6, 7], [8, 9, 10]], 4: [[None]]}


def as_ours(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Debezium's records as ours would be with only the documented deviations."""
    out: list[dict[str, Any]] = []
    last: dict[Any, dict[str, Any]] = {}
    for r in copy.deepcopy(records):
        envelope = payload(r["value"])
        if envelope is not None:
            envelope["ts_ms"] += 1
            envelope["source"]["version"] = "0.1.0"
            if envelope["op"] == "r":
                _other_snapshot_point(envelope["source"])
            key = key_payload(r["key"])
            for image in ("before", "after"):
                row = envelope.get(image)
                if isinstance(row, dict):
                    _fill(row, last.get(key["id"] if key else None, {}))
            if isinstance(envelope.get("after"), dict):
                last[key["id"]] = envelope["after"]
        out.append(r)
    return out


def _other_snapshot_point(source: dict[str, Any]) -> None:
    # Our snapshot reads at our slot's point: another txId and lsn, the same shape.
    if isinstance(source["lsn"], int):
        old, source["lsn"] = source["lsn"], source["lsn"] + 8
        source["txId"] += 1
        source["sequence"] = source["sequence"].replace(str(old), str(source["lsn"]))
    source["ts_ms"] += 1


def _fill(row: dict[str, Any], previous: dict[str, Any]) -> None:
    for column, value in row.items():
        if value == UNAVAILABLE:
            row[column] = previous[column]
    if row.get("c_int_2d") is not None:
        row["c_int_2d"] = ARRAYS[row["id"]]


def test_the_captured_records_with_only_our_deviations_compare_equal() -> None:
    for setting in ("defaults", "readable"):
        lines = (EXPECTED / f"{setting}.jsonl").read_text(encoding="utf-8").splitlines()
        theirs = [json.loads(line) for line in lines]
        ours = as_ours(theirs)
        mine, their = by_topic(ours, TOPICS), by_topic(theirs, TOPICS)
        found = [d for t in TOPICS for d in compare_topic(t, mine[t], their[t], DEVIATIONS)]
        assert found == [], summary(found)
        # One value changed anywhere is one difference, named by its path.
        payload(ours[0]["value"])["after"]["c_int4"] = 1  # type: ignore[index]
        found = compare_topic(
            TOPICS[0], by_topic(ours, TOPICS)[TOPICS[0]], their[TOPICS[0]], DEVIATIONS
        )
        assert [d.path for d in found] == [
            "value.payload.after.c_int4" if setting == "defaults" else "value.after.c_int4"
        ]
