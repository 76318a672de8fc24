"""The envelope's shape per envelope option, as Debezium 3.6.1 writes it
(tests/debezium/OBSERVED.md "Records, per change" and "The schema block")."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

import connectors.postgres.assembly.connect  # noqa: F401  (registers PostgreSQL's source struct)
from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.envelope import encode as envelope
from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE, EnvelopeOptions

EXPECTED = Path(__file__).resolve().parents[1] / "debezium" / "expected"
PG_EXTRA = {"lsn": 30867616, "xmin": None, "origin": None, "origin_lsn": None}


def _event(op: Op = Op.UPDATE) -> ChangeEvent:
    source = SourceInfo(
        "postgresql", "dbz", "public", "tricky", 1796139135748, 30867616, 0, "false", 761,
        dict(PG_EXTRA), 1796139135748268, '["30867616","30867616"]',
    )  # fmt: skip
    after = None if op in (Op.DELETE, Op.TRUNCATE) else {"id": 3, "region": "ap"}
    before = {"id": 3, "region": "ap"} if op is Op.DELETE else None
    key = {} if op is Op.TRUNCATE else {"id": 3, "region": "ap"}
    return ChangeEvent(op, key, before, after, source)


def _debezium(setting: str, op: str) -> dict:
    for line in (EXPECTED / f"{setting}.jsonl").read_text().splitlines():
        record = json.loads(line)
        value = envelope.payload(record["value"])
        if value is not None and value["op"] == op and value["source"]["snapshot"] == "false":
            return record
    raise AssertionError(f"no {op} in {setting}")


def test_source_and_envelope_keys_are_debeziums_in_order_and_the_position_beside() -> None:
    [record] = envelope.to_records(_event(), "dbz", 5)
    value = orjson.loads(record.value)
    theirs = _debezium("readable", "u")["value"]
    assert list(value) == list(theirs)
    assert list(value["source"]) == list(theirs["source"])  # no source.pos: Debezium's
    same = ("connector", "name", "snapshot", "schema", "table", "xmin", "origin", "origin_lsn")
    assert {k: value["source"][k] for k in same} == {k: theirs["source"][k] for k in same}
    src = value["source"]
    assert (src["ts_us"], src["ts_ns"]) == (1796139135748268, 1796139135748268000)
    assert (src["sequence"], src["lsn"], src["xmin"], src["origin"]) == (
        '["30867616","30867616"]', 30867616, None, None,
    )  # fmt: skip
    assert value["transaction"] is None
    assert (value["ts_ms"], value["ts_us"], value["ts_ns"]) == (5, 5000, 5000000)
    assert record.pos == b"[30867616,0]"
    assert envelope.record_pos(record.pos, value) == (30867616, 0)


def test_tombstones_on_delete_and_skipped_operations() -> None:
    records = envelope.to_records(_event(Op.DELETE), "dbz", 1)
    assert [r.value is None for r in records] == [False, True]
    off = EnvelopeOptions.model_validate({"tombstones.on.delete": False})
    assert [r.value is None for r in envelope.to_records(_event(Op.DELETE), "dbz", 1, off)] == [
        False
    ]
    events = [_event(Op.TRUNCATE), _event(Op.UPDATE)]
    assert envelope.batch_records(events, "dbz", 1, READABLE)[0].key is None  # as Debezium
    kept = envelope.batch_records(events, "dbz", 1, DEBEZIUM_DEFAULTS)  # skipped.operations=t
    assert [orjson.loads(r.value)["payload"]["op"] for r in kept] == ["u"]


def test_schemas_enable_wraps_values_and_keys_and_tombstones_stay_bare() -> None:
    records = envelope.to_records(_event(Op.DELETE), "dbz", 1, DEBEZIUM_DEFAULTS)
    value, key = orjson.loads(records[0].value), orjson.loads(records[0].key)
    assert list(value) == ["schema", "payload"] and list(key) == ["schema", "payload"]
    assert records[1].value is None and records[1].key == records[0].key
    theirs = _debezium("defaults", "d")["value"]["schema"]
    assert value["schema"]["name"] == "dbz.public.tricky.Envelope" == theirs["name"]
    assert value["schema"]["version"] == 2
    ours_fields = {f["field"]: f for f in value["schema"]["fields"]}
    their_fields = {f["field"]: f for f in theirs["fields"]}
    assert list(ours_fields) == list(their_fields)
    for name in ("transaction", "op", "ts_ms", "ts_us", "ts_ns"):
        assert ours_fields[name] == their_fields[name]
    assert ours_fields["source"] == their_fields["source"]  # no source.pos: Debezium's
    assert key["payload"] == {"id": 3, "region": "ap"}
    assert key["schema"]["name"] == "dbz.public.tricky.Key"


def test_an_inferred_key_schema_follows_the_keys_type() -> None:
    # A source without Connect schemas of its own gets them inferred; two records of one table
    # whose keys differ in type must not share one cached key schema.
    source = SourceInfo("generator", "db", "public", "t", 1, 1, extra={})
    events = [
        ChangeEvent(Op.CREATE, {"id": 1}, None, {"v": "a"}, source),
        ChangeEvent(Op.CREATE, {"id": "one"}, None, {"v": "b"}, source),
    ]
    keys = [orjson.loads(r.key) for r in envelope.batch_records(events, "p", 1, DEBEZIUM_DEFAULTS)]
    assert [k["schema"]["fields"][0]["type"] for k in keys] == ["int64", "string"]
