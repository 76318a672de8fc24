"""``unwrap`` (Debezium's ``ExtractNewRecordState``) on records as the runtime hands them to
sinks, held to Debezium 3.x's behaviour (``DefaultDeleteHandlingStrategy`` and
``ExtractNewRecordStateTest``), and the jsonl sink's ``unwrap:`` option."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from cdc.config.pipeline import parse
from cdc.contracts.errors import ConfigError
from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.envelope import encode as envelope
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.log.base import TopicPartition
from cdc.support.logging import get_logger
from cdc.transforms.unwrap import UnwrapOptions, unwrap_options, unwrap_records
from sinks.jsonl import JsonlSink, JsonlSinkConfig

PIPELINE = "shop"
TOPIC = "shop.public.users"
NO_TOMBSTONES = EnvelopeOptions.model_validate({"tombstones.on.delete": False})


def change(op: Op, key: int = 1, transaction: dict[str, Any] | None = None) -> ChangeEvent:
    source = SourceInfo(
        "postgresql", "db", "public", "users", 1_700_000_000_123, 40 + key, 0, tx_id=571,
        extra={"lsn": 1234, "xmin": None},
    )  # fmt: skip
    row = {"id": key, "name": f"n{key}"}
    if op is Op.TRUNCATE:
        return ChangeEvent(op, {}, None, None, source)
    if op is Op.DELETE:
        return ChangeEvent(op, {"id": key}, row, None, source, transaction=transaction)
    before = {"id": key, "name": "old"} if op is Op.UPDATE else None
    return ChangeEvent(op, {"id": key}, before, row, source, transaction=transaction)


class Offsets:
    def __init__(self) -> None:
        self.next = 0

    def records(
        self, *events: ChangeEvent, options: EnvelopeOptions = READABLE
    ) -> list[SinkRecord]:
        """Records as the sink runner hands them over: decoded, with fresh offsets."""
        out = []
        for event in events:
            for record in envelope.to_records(
                event, PIPELINE, now_ms=1_700_000_000_999, options=options
            ):
                key = orjson.loads(record.key or b"null")
                value = None if record.value is None else orjson.loads(record.value)
                out.append(SinkRecord(record.topic, 0, self.next, key, value, pos=record.pos))
                self.next += 1
        return out


def unwrapped(events: Iterable[ChangeEvent], **options: Any) -> list[Any]:
    """``(key, value)`` of each record unwrap writes for ``events``."""
    records = Offsets().records(*events)
    return [
        (r.key, r.value) for r in unwrap_records(records, UnwrapOptions.model_validate(options))
    ]


def modes(mode: str, envelope_options: EnvelopeOptions = READABLE) -> list[Any]:
    records = Offsets().records(change(Op.CREATE), change(Op.DELETE), options=envelope_options)
    opts = UnwrapOptions.model_validate({"delete.tombstone.handling.mode": mode})
    return [(r.key, r.value) for r in unwrap_records(records, opts)]


CREATED = ({"id": 1}, {"id": 1, "name": "n1"})
TOMBSTONE = ({"id": 1}, None)


# -- rows ------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", [Op.CREATE, Op.UPDATE, Op.READ])
def test_a_row_change_becomes_its_after(op: Op) -> None:
    assert unwrapped([change(op)]) == [CREATED]


def test_offsets_keys_and_order_are_kept() -> None:
    records = Offsets().records(change(Op.CREATE, 1), change(Op.UPDATE, 2))
    out = unwrap_records(records, UnwrapOptions())
    assert [(r.topic, r.partition, r.offset, r.key) for r in out] == [
        (TOPIC, 0, 0, {"id": 1}),
        (TOPIC, 0, 1, {"id": 2}),
    ]


def test_the_given_records_are_not_changed() -> None:
    records = Offsets().records(change(Op.CREATE))
    value = orjson.dumps(records[0].value)
    unwrap_records(records, UnwrapOptions.model_validate({"add.fields": "op,source.ts_ms"}))
    assert orjson.dumps(records[0].value) == value


# -- delete.tombstone.handling.mode ----------------------------------------------------------


def test_default_mode_is_tombstone() -> None:
    assert UnwrapOptions().delete_handling == "tombstone"


def test_tombstone_mode_leaves_one_tombstone_per_delete() -> None:
    assert modes("tombstone") == [CREATED, TOMBSTONE]


def test_tombstone_mode_without_tombstones_on_delete_still_deletes() -> None:
    # Debezium turns the delete itself into the tombstone: it does not depend on the
    # connector writing one after it.
    assert modes("tombstone", NO_TOMBSTONES) == [CREATED, TOMBSTONE]


def test_drop_mode_drops_delete_and_tombstone() -> None:
    assert modes("drop") == [CREATED]
    assert modes("drop", NO_TOMBSTONES) == [CREATED]


def test_rewrite_mode_rewrites_the_delete_and_drops_the_tombstone() -> None:
    assert modes("rewrite") == [
        ({"id": 1}, {"id": 1, "name": "n1", "__deleted": "false"}),
        ({"id": 1}, {"id": 1, "name": "n1", "__deleted": "true"}),
    ]


def test_rewrite_with_tombstone_keeps_the_tombstone() -> None:
    assert modes("rewrite-with-tombstone") == [
        ({"id": 1}, {"id": 1, "name": "n1", "__deleted": "false"}),
        ({"id": 1}, {"id": 1, "name": "n1", "__deleted": "true"}),
        TOMBSTONE,
    ]


def test_delete_to_tombstone_turns_the_delete_into_the_tombstone() -> None:
    assert modes("delete-to-tombstone") == [CREATED, TOMBSTONE]
    assert modes("delete-to-tombstone", NO_TOMBSTONES) == [CREATED, TOMBSTONE]


def test_deleted_field_is_not_prefixed() -> None:
    out = unwrapped(
        [change(Op.CREATE)],
        **{"delete.tombstone.handling.mode": "rewrite", "add.fields.prefix": "meta_"},
    )
    assert out[0][1]["__deleted"] == "false"
    assert "meta_deleted" not in out[0][1]


def test_a_truncate_is_dropped() -> None:
    for mode in ("tombstone", "drop", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone"):
        assert unwrapped([change(Op.TRUNCATE)], **{"delete.tombstone.handling.mode": mode}) == []


def test_a_record_that_is_no_change_event_passes() -> None:
    other = SinkRecord(TOPIC, 0, 0, {"id": 1}, {"id": 1, "name": "flat"})
    assert unwrap_records([other], UnwrapOptions()) == [other]


def test_a_delete_without_before_is_rewritten_from_its_key() -> None:
    [record] = Offsets().records(change(Op.DELETE), options=NO_TOMBSTONES)
    assert record.value is not None
    record.value["before"] = None  # MongoDB without pre-images
    [out] = unwrap_records([record], UnwrapOptions.model_validate({"delete_handling": "rewrite"}))
    assert out.value == {"id": 1, "__deleted": "true"}


def test_a_row_written_as_json_text_is_parsed() -> None:
    [record] = Offsets().records(change(Op.CREATE))
    assert record.value is not None
    record.value["after"] = '{"_id": {"$oid": "65a1"}, "name": "n1"}'  # MongoDB's form
    [out] = unwrap_records([record], UnwrapOptions())
    assert out.value == {"_id": {"$oid": "65a1"}, "name": "n1"}


# -- add.fields ------------------------------------------------------------------------------

TXN = {"id": "571:1234", "total_order": 42, "data_collection_order": 7}


def test_add_fields_envelope_fields() -> None:
    [(_, value)] = unwrapped([change(Op.UPDATE)], **{"add.fields": "op,ts_ms,ts_us,ts_ns"})
    assert value == {
        "id": 1,
        "name": "n1",
        "__op": "u",
        "__ts_ms": 1_700_000_000_999,
        "__ts_us": 1_700_000_000_999_000,
        "__ts_ns": 1_700_000_000_999_000_000,
    }


def test_add_fields_bare_names_are_the_source_blocks() -> None:
    [(_, value)] = unwrapped([change(Op.CREATE)], **{"add.fields": "table,lsn,db,txId"})
    assert {k: v for k, v in value.items() if k.startswith("__")} == {
        "__table": "users",
        "__lsn": 1234,
        "__db": "db",
        "__txId": 571,
    }


def test_add_fields_with_the_block_named() -> None:
    [(_, value)] = unwrapped(
        [change(Op.CREATE, transaction=TXN)],
        **{"add.fields": "op,source.lsn,source.ts_ms,transaction.id,transaction.total_order"},
    )
    assert {k: v for k, v in value.items() if k.startswith("__")} == {
        "__op": "c",
        "__source_lsn": 1234,
        "__source_ts_ms": 1_700_000_000_123,
        "__transaction_id": "571:1234",
        "__transaction_total_order": 42,
    }


def test_add_fields_bare_transaction_names_and_a_prefix() -> None:
    # ExtractNewRecordStateTest.testAddFields: "op , lsn,id" with prefix "prefix."
    [(_, value)] = unwrapped(
        [change(Op.UPDATE, transaction=TXN)],
        **{"add.fields": "op , lsn,id", "add.fields.prefix": "prefix."},
    )
    assert value == {
        "id": 1,
        "name": "n1",
        "prefix.op": "u",
        "prefix.lsn": 1234,
        "prefix.id": "571:1234",
    }


def test_add_fields_of_a_null_transaction_block_are_null() -> None:
    # ExtractNewRecordStateTest.testAddFieldsForMissingOptionalField: __id is null.
    [(_, value)] = unwrapped([change(Op.CREATE)], **{"add.fields": "op,lsn,id"})
    assert (value["__op"], value["__lsn"], value["__id"]) == ("c", 1234, None)


def test_add_fields_new_names() -> None:
    # ExtractNewRecordStateTest.testNewFieldAndHeaderMapping
    [(_, value)] = unwrapped(
        [change(Op.UPDATE, transaction=TXN)],
        **{
            "add.fields": "op:OP, lsn:LSN, id:ID, source.lsn:source_lsn, "
            "transaction.total_order:TOTAL_ORDER",
            "add.fields.prefix": "",
        },
    )
    assert value == {
        "id": 1,
        "name": "n1",
        "OP": "u",
        "LSN": 1234,
        "ID": "571:1234",
        "source_lsn": 1234,
        "TOTAL_ORDER": 42,
    }


def test_add_fields_leaves_out_what_the_event_lacks() -> None:
    # ExtractNewRecordStateTest.testNewNotDefaultField: notExisting is not added.
    [(_, value)] = unwrapped([change(Op.CREATE)], **{"add.fields": "notExisting,source.nope,op"})
    assert value == {"id": 1, "name": "n1", "__op": "c"}


def test_add_fields_come_after_deleted_on_a_rewritten_delete() -> None:
    out = unwrapped(
        [change(Op.DELETE)],
        **{"delete.tombstone.handling.mode": "rewrite", "add.fields": "op,source.ts_ms"},
    )
    assert out == [
        (
            {"id": 1},
            {
                "id": 1,
                "name": "n1",
                "__deleted": "true",
                "__op": "d",
                "__source_ts_ms": 1_700_000_000_123,
            },
        )
    ]
    assert list(out[0][1]) == ["id", "name", "__deleted", "__op", "__source_ts_ms"]


def test_add_fields_do_not_reach_a_tombstone() -> None:
    assert unwrapped([change(Op.DELETE)], **{"add.fields": "op"}) == [TOMBSTONE]


def test_add_fields_from_the_schemas_enable_payload() -> None:
    records = Offsets().records(
        change(Op.CREATE), options=EnvelopeOptions.model_validate({"schemas.enable": True})
    )
    payloads = [
        SinkRecord(
            r.topic, r.partition, r.offset, envelope.payload(r.key), envelope.payload(r.value)
        )
        for r in records
    ]  # what the runner hands a sink
    [out] = unwrap_records(payloads, UnwrapOptions.model_validate({"add.fields": "op"}))
    assert out.value == {"id": 1, "name": "n1", "__op": "c"}


# -- options ---------------------------------------------------------------------------------


def test_options_take_debezium_names_and_python_names() -> None:
    dotted = UnwrapOptions.model_validate(
        {
            "delete.tombstone.handling.mode": "rewrite",
            "add.fields": "op, source.ts_ms",
            "add.fields.prefix": "_",
        }
    )
    named = UnwrapOptions(
        delete_handling="rewrite", add_fields=("op", "source.ts_ms"), add_fields_prefix="_"
    )
    assert dotted == named
    assert dotted.add_fields == ("op", "source.ts_ms")


def test_add_fields_as_a_yaml_list() -> None:
    assert UnwrapOptions.model_validate({"add.fields": ["op", "table"]}).add_fields == (
        "op",
        "table",
    )


@pytest.mark.parametrize(
    "options",
    [
        {"delete.tombstone.handling.mode": "none"},
        {"add.fields": "foo.bar"},
        {"add.fields": "source."},
        {"add.fields": "op:a:b"},
        {"add.fields": "op:"},
        {"drop.tombstones": True},
    ],
    ids=["old-mode", "unknown-block", "no-field", "two-colons", "empty-name", "unknown-option"],
)
def test_invalid_options(options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        UnwrapOptions.model_validate(options)


def test_unwrap_true_false_and_absent() -> None:
    assert unwrap_options(True) == {}
    assert unwrap_options(False) is None
    assert unwrap_options(None) is None
    assert unwrap_options({"add.fields": "op"}) == {"add.fields": "op"}


# -- the jsonl sink --------------------------------------------------------------------------

FILE = """
version: 1
name: shop
source:
  type: generator
  tables: [public.users]
sinks:
  - name: flat
    type: jsonl
    path: {path}
{unwrap}
"""


def jsonl_config(path: Path, unwrap: str) -> JsonlSinkConfig:
    pipeline = parse(FILE.format(path=path, unwrap=unwrap), {})
    sink = pipeline.sinks[0]
    assert isinstance(sink, JsonlSinkConfig)
    return sink


def test_jsonl_config_unwrap_forms(tmp_path: Path) -> None:
    assert jsonl_config(tmp_path, "").unwrap is None
    assert jsonl_config(tmp_path, "    unwrap: false").unwrap is None
    assert jsonl_config(tmp_path, "    unwrap: true").unwrap == UnwrapOptions()
    dotted = jsonl_config(
        tmp_path,
        "    unwrap:\n      delete.tombstone.handling.mode: rewrite\n      add.fields: op,table",
    ).unwrap
    assert dotted == UnwrapOptions(delete_handling="rewrite", add_fields=("op", "table"))


def test_jsonl_config_unwrap_errors_have_their_paths(tmp_path: Path) -> None:
    text = FILE.format(
        path=tmp_path,
        unwrap="    unwrap:\n      delete.tombstone.handling.mode: maybe\n      colour: blue",
    )
    with pytest.raises(ConfigError) as info:
        parse(text, {})
    problems = dict(info.value.problems)
    assert set(problems) == {
        "sinks[0].unwrap.delete.tombstone.handling.mode",
        "sinks[0].unwrap.colour",
    }
    assert problems["sinks[0].unwrap.colour"] == "unknown key"


def open_sink(config: JsonlSinkConfig) -> JsonlSink:
    context = SinkContext(PIPELINE, "flat", [("public", "users")], _NoSchemas(), get_logger())
    sink = JsonlSink(config, context)
    sink.open()
    return sink


class _NoSchemas:
    def get(self, schema: str, table: str) -> None:
        return None


def lines(path: Path) -> list[dict[str, Any]]:
    file = path / f"{TOPIC}.jsonl"
    return [orjson.loads(line) for line in file.read_bytes().splitlines()]


def test_jsonl_sink_writes_flat_rows_and_stores_every_offset(tmp_path: Path) -> None:
    config = jsonl_config(tmp_path / "flat", "    unwrap: true")
    offsets = Offsets()
    records = offsets.records(
        change(Op.CREATE, 1), change(Op.UPDATE, 2), change(Op.DELETE, 1), change(Op.TRUNCATE)
    )  # c, u, d, tombstone, t
    sink = open_sink(config)
    sink.write(records)
    sink.flush()
    sink.close()
    assert [(line["offset"], line["key"], line["value"]) for line in lines(tmp_path / "flat")] == [
        (0, {"id": 1}, {"id": 1, "name": "n1"}),
        (1, {"id": 2}, {"id": 2, "name": "n2"}),
        (2, {"id": 1}, None),  # the delete, as its tombstone; the tombstone after it dropped
    ]
    reopened = open_sink(config)
    # The tombstone and the truncate wrote nothing, and are not read again.
    assert reopened.stored_offsets() == {TopicPartition(TOPIC, 0): 5}
    reopened.close()


def test_jsonl_sink_rewrite_mode(tmp_path: Path) -> None:
    config = jsonl_config(
        tmp_path / "flat",
        "    unwrap:\n      delete.tombstone.handling.mode: rewrite\n      add.fields: op",
    )
    sink = open_sink(config)
    sink.write(Offsets().records(change(Op.CREATE, 1), change(Op.DELETE, 1)))
    sink.flush()
    sink.close()
    assert [line["value"] for line in lines(tmp_path / "flat")] == [
        {"id": 1, "name": "n1", "__deleted": "false", "__op": "c"},
        {"id": 1, "name": "n1", "__deleted": "true", "__op": "d"},
    ]


def test_jsonl_sink_without_unwrap_writes_envelopes(tmp_path: Path) -> None:
    sink = open_sink(jsonl_config(tmp_path / "env", ""))
    sink.write(Offsets().records(change(Op.CREATE, 1)))
    sink.flush()
    sink.close()
    [line] = lines(tmp_path / "env")
    assert line["value"]["op"] == "c"
    assert line["value"]["after"] == {"id": 1, "name": "n1"}
