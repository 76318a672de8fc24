"""The built-in transforms and the chain that runs them, on events, shapes and records."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import orjson
import pytest

from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.schema import Column, TableSchema
from cdc.envelope import encode as envelope
from cdc.envelope.connect_schema import TableSchemas, inferred_schemas
from cdc.envelope.json_rows import EncodedRow
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.transforms import (
    TransformChain,
    TransformConfig,
    TransformError,
    TransformShapeError,
    build_chain,
)
from cdc.transforms.fields import AddFieldConfig, RenameFieldsConfig
from cdc.transforms.route import DEBEZIUM_KEY_FIELD, RouteConfig

PIPELINE = "shop"
SHARDS = ("public.orders_1", "public.orders_2", "public.users")
MERGE = RouteConfig(match=r"public\.orders_\d+", topic="public.orders")
WITH_SCHEMAS = EnvelopeOptions.model_validate({"schemas.enable": True})


def event(
    table: str = "orders_1",
    op: Op = Op.CREATE,
    key: int = 7,
    schema: str = "public",
    **columns: Any,
) -> ChangeEvent:
    """A change of ``schema.table`` keyed by ``id``, with a PostgreSQL-like source block."""
    row = {"id": key, "total": 10, **columns}
    source = SourceInfo(
        "postgresql", "shopdb", schema, table, 1_700_000_000_000, 900, 3, tx_id=55,
        extra={"lsn": 880, "xmin": None},
    )  # fmt: skip
    if op is Op.TRUNCATE:
        return ChangeEvent(op, {}, None, None, source)
    if op is Op.DELETE:
        return ChangeEvent(op, {"id": key}, row, None, source)
    before = dict(row) if op is Op.UPDATE else None
    return ChangeEvent(op, {"id": key}, before, row, source)


def chain(*configs: TransformConfig, tables: tuple[str, ...] = SHARDS) -> TransformChain:
    return build_chain(configs, PIPELINE, tables)


def one(chain_: TransformChain, change: ChangeEvent) -> ChangeEvent:
    out = chain_.apply(change)
    assert len(out) == 1
    return out[0]


def shape(table: str = "orders_1", *extra: Column) -> TableSchema:
    columns = (Column("id", "bigint", key=True, nullable=False), Column("total", "integer"))
    return TableSchema("postgresql", "public", table, (*columns, *extra), position=5)


def records_of(change: ChangeEvent, options: EnvelopeOptions = READABLE) -> list[Any]:
    return envelope.to_records(change, PIPELINE, now_ms=1, options=options)


# -- route -----------------------------------------------------------------------------------


def test_route_adds_the_original_topic_to_key_and_rows() -> None:
    routed = one(chain(MERGE), event("orders_2", Op.UPDATE))
    original = "shop.public.orders_2"
    assert routed.key == {"id": 7, DEBEZIUM_KEY_FIELD: original}
    assert routed.before == {"id": 7, "total": 10, DEBEZIUM_KEY_FIELD: original}
    assert routed.after == {"id": 7, "total": 10, DEBEZIUM_KEY_FIELD: original}
    assert routed.destination == ("public", "orders")
    assert routed.topic_table == ("public", "orders")
    assert routed.table_id == "public.orders_2"  # the source block keeps the real table
    assert routed.source.table == "orders_2"


def test_route_keeps_keys_of_merged_tables_apart() -> None:
    merge = chain(MERGE)
    first, second = one(merge, event("orders_1")), one(merge, event("orders_2"))
    assert first.key["id"] == second.key["id"]
    assert first.key != second.key


def test_route_custom_key_field() -> None:
    routed = one(chain(MERGE.model_copy(update={"key_field": "shard"})), event("orders_1"))
    assert routed.key == {"id": 7, "shard": "shop.public.orders_1"}
    assert routed.after is not None and routed.after["shard"] == "shop.public.orders_1"


def test_route_without_key_field_leaves_key_and_rows() -> None:
    change = event("orders_1")
    routed = one(chain(MERGE.model_copy(update={"key_field": None})), change)
    assert routed.key == {"id": 7}
    assert routed.after == change.after
    assert routed.destination == ("public", "orders")


def test_route_leaves_other_tables_alone() -> None:
    change = event("users")
    assert one(chain(MERGE), change) is change


def test_route_group_reference() -> None:
    by_shard = RouteConfig(match=r"public\.orders_(\d+)", topic=r"shard_\1.orders")
    routed = one(chain(by_shard), event("orders_2"))
    assert routed.destination == ("shard_2", "orders")
    assert chain(by_shard).table("public.orders_1") == "shard_1.orders"


def test_truncate_of_a_table_routed_alone_passes() -> None:
    alone = RouteConfig(match=r"public\.users", topic="crm.people")
    routed = one(chain(alone), event("users", Op.TRUNCATE))
    assert routed.op is Op.TRUNCATE
    assert routed.destination == ("crm", "people")
    assert routed.key == {}


def test_truncate_into_a_merged_table_is_a_transform_error() -> None:
    with pytest.raises(TransformError) as info:
        chain(MERGE).apply(event("orders_1", Op.TRUNCATE))
    message = str(info.value)
    assert message.startswith("transforms[0] (route) failed on a change of public.orders_1")
    assert "public.orders, which merges several tables" in message
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.reason == message  # what a dead letter records


def test_truncate_of_the_table_others_are_routed_onto_is_refused() -> None:
    into_users = RouteConfig(match=r"public\.orders_1", topic="public.users")
    merge = chain(into_users)
    assert merge.table("public.orders_1") == merge.table("public.users") == "public.users"
    with pytest.raises(TransformError, match="merges several tables"):
        merge.apply(event("users", Op.TRUNCATE))
    with pytest.raises(TransformError, match="merges several tables"):
        merge.apply(event("orders_1", Op.TRUNCATE))


def test_two_routes_onto_one_table_are_a_merge() -> None:
    first = RouteConfig(match=r"public\.orders_1", topic="public.orders")
    second = RouteConfig(match=r"public\.orders_2", topic="public.orders")
    merge = chain(first, second)
    assert merge.table("public.orders_1") == merge.table("public.orders_2") == "public.orders"
    with pytest.raises(TransformError, match="merges several tables"):
        merge.apply(event("orders_1", Op.TRUNCATE))
    with pytest.raises(TransformError, match="merges several tables"):
        merge.apply(event("orders_2", Op.TRUNCATE))


def test_route_schema_adds_the_key_column_and_names_the_target() -> None:
    routed = chain(MERGE).schema(shape())
    assert (routed.schema, routed.table) == ("public", "orders")
    assert routed.key_columns == ["id", DEBEZIUM_KEY_FIELD]
    added = routed.columns[-1]
    assert added == Column(DEBEZIUM_KEY_FIELD, "text", key=True, nullable=False)
    assert chain(MERGE).schema(shape("users")) == shape("users")


def test_route_records_go_to_the_routed_topic() -> None:
    records = [r for c in chain(MERGE).apply(event("orders_1", Op.DELETE)) for r in records_of(c)]
    assert [r.topic for r in records] == ["shop.public.orders", "shop.public.orders"]
    assert records[1].value is None  # the tombstone follows its delete
    key = orjson.loads(records[0].key or b"")
    assert key == {"id": 7, DEBEZIUM_KEY_FIELD: "shop.public.orders_1"}
    value = orjson.loads(records[0].value or b"")
    assert value["source"]["table"] == "orders_1"
    assert value["before"][DEBEZIUM_KEY_FIELD] == "shop.public.orders_1"


def test_route_renames_the_connect_schemas_and_keeps_column_types() -> None:
    change = event("orders_1")
    typed = inferred_schemas(
        "shop.public.orders_1", "postgresql", change.after or {}, change.key, {}, True
    )
    value = orjson.loads(typed.value)
    value["fields"][0]["fields"][1]["type"] = "int32"  # what only the source knows
    value["fields"][1]["fields"][1]["type"] = "int32"
    change.connect = TableSchemas.of(value, orjson.loads(typed.key or b""))
    routed = one(chain(MERGE), change)
    [record] = records_of(routed, WITH_SCHEMAS)
    schema = orjson.loads(record.value or b"")["schema"]
    assert schema["name"] == "shop.public.orders.Envelope"
    after = next(f for f in schema["fields"] if f["field"] == "after")
    assert after["name"] == "shop.public.orders.Value"
    assert [(f["field"], f["type"]) for f in after["fields"]] == [
        ("id", "int64"),
        ("total", "int32"),
        (DEBEZIUM_KEY_FIELD, "string"),
    ]
    key_schema = orjson.loads(record.key or b"")["schema"]
    assert key_schema["name"] == "shop.public.orders.Key"
    assert [f["field"] for f in key_schema["fields"]] == ["id", DEBEZIUM_KEY_FIELD]


def test_route_without_key_field_renames_the_connect_schemas() -> None:
    change = event("orders_1")
    change.connect = inferred_schemas(
        "shop.public.orders_1", "postgresql", change.after or {}, change.key, {}, True
    )
    routed = one(chain(MERGE.model_copy(update={"key_field": None})), change)
    [record] = records_of(routed, WITH_SCHEMAS)
    assert b"orders_1.Envelope" not in (record.value or b"")
    assert orjson.loads(record.value or b"")["schema"]["name"] == "shop.public.orders.Envelope"
    assert orjson.loads(record.key or b"")["schema"]["name"] == "shop.public.orders.Key"


# -- rename_fields ---------------------------------------------------------------------------


def test_rename_fields_renames_key_and_rows() -> None:
    rename = chain(RenameFieldsConfig(fields={"id": "order_id", "total": "amount"}))
    renamed = one(rename, event("orders_1", Op.UPDATE))
    assert renamed.key == {"order_id": 7}
    assert renamed.before == renamed.after == {"order_id": 7, "amount": 10}
    assert renamed.destination is None


def test_rename_fields_schema() -> None:
    rename = chain(RenameFieldsConfig(fields={"id": "order_id"}))
    renamed = rename.schema(shape())
    assert renamed.key_columns == ["order_id"]
    assert [c.name for c in renamed.columns] == ["order_id", "total"]


def test_rename_fields_can_swap() -> None:
    swap = chain(RenameFieldsConfig(fields={"id": "total", "total": "id"}))
    assert one(swap, event()).after == {"total": 7, "id": 10}


def test_rename_onto_a_kept_column_is_refused() -> None:
    rename = chain(RenameFieldsConfig(fields={"total": "id"}))
    with pytest.raises(TransformError, match="two columns the name id"):
        rename.apply(event())
    with pytest.raises(TransformShapeError) as info:
        rename.schema(shape())
    assert str(info.value).startswith(
        "transforms[0] (rename_fields) failed on the shape of public.orders_1: ValueError: "
    )
    assert "two columns the name id" in str(info.value)


def test_rename_fields_only_where_match_matches() -> None:
    rename = chain(RenameFieldsConfig(match=r"public\.users", fields={"total": "sum"}))
    untouched = event("orders_1")
    assert one(rename, untouched) is untouched
    assert one(rename, event("users")).after == {"id": 7, "sum": 10}
    assert rename.schema(shape()) == shape()


def test_rename_fields_keeps_connect_types() -> None:
    change = event()
    change.connect = inferred_schemas(
        "shop.public.orders_1", "postgresql", change.after or {}, change.key, {}, True
    )
    renamed = one(chain(RenameFieldsConfig(fields={"id": "order_id"})), change)
    [record] = records_of(renamed, WITH_SCHEMAS)
    value = orjson.loads(record.value or b"")
    after = next(f for f in value["schema"]["fields"] if f["field"] == "after")
    assert [f["field"] for f in after["fields"]] == ["order_id", "total"]
    assert value["payload"]["after"] == {"order_id": 7, "total": 10}
    key = orjson.loads(record.key or b"")
    assert [f["field"] for f in key["schema"]["fields"]] == ["order_id"]


# -- add_field -------------------------------------------------------------------------------


def test_add_field_constant() -> None:
    added = one(chain(AddFieldConfig(field="region", value="eu")), event(op=Op.UPDATE))
    assert added.before == added.after == {"id": 7, "total": 10, "region": "eu"}
    assert added.key == {"id": 7}


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("op", "u"),
        ("table", "public.orders_1"),
        ("source.db", "shopdb"),
        ("source.ts_ms", 1_700_000_000_000),
        ("source.lsn", 880),
        ("source.txId", 55),
        ("source.name", PIPELINE),
        ("source.connector", "postgresql"),
        ("source.snapshot", "false"),
        ("source.nope", None),
    ],
)
def test_add_field_from_the_change(source: str, value: Any) -> None:
    added = one(chain(AddFieldConfig(field="meta", source=source)), event(op=Op.UPDATE))
    assert added.after is not None and added.after["meta"] == value
    assert added.before is not None and added.before["meta"] == value


def test_add_field_from_the_source_block_agrees_with_the_record() -> None:
    change = event()
    [record] = records_of(change)
    block = orjson.loads(record.value or b"")["source"]
    for name in ("version", "name", "ts_us", "ts_ns", "sequence", "schema", "table", "xmin"):
        added = one(chain(AddFieldConfig(field="x", source=f"source.{name}")), change)
        assert added.after is not None and added.after["x"] == block[name], name


@pytest.mark.parametrize(
    ("config", "stable"),
    [
        (AddFieldConfig(field="x", value=1), True),
        (AddFieldConfig(field="x", source="table"), True),
        (AddFieldConfig(field="x", source="source.db"), True),
        (AddFieldConfig(field="x", source="source.name"), True),
        (AddFieldConfig(field="x", source="op"), False),
        (AddFieldConfig(field="x", source="source.ts_ms"), False),
        (AddFieldConfig(field="x", source="source.lsn"), False),
        (AddFieldConfig(field="x", source="source.snapshot"), False),
    ],
)
def test_add_field_applies_to_rows_only_when_stable(config: AddFieldConfig, stable: bool) -> None:
    built = chain(config)
    assert built.unverifiable() == ([] if stable else ["transforms[0] (add_field)"])


def test_add_field_schema_types() -> None:
    def added_type(config: AddFieldConfig) -> str:
        return chain(config).schema(shape()).columns[-1].type

    assert added_type(AddFieldConfig(field="x", value="eu")) == "text"
    assert added_type(AddFieldConfig(field="x", value=3)) == "bigint"
    assert added_type(AddFieldConfig(field="x", value=2.5)) == "double precision"
    assert added_type(AddFieldConfig(field="x", value=True)) == "boolean"
    assert added_type(AddFieldConfig(field="x", source="source.ts_ms")) == "bigint"
    assert added_type(AddFieldConfig(field="x", source="op")) == "text"


def test_add_field_replaces_a_column_of_its_name_in_the_schema() -> None:
    added = chain(AddFieldConfig(field="total", value="x")).schema(shape())
    assert [c.name for c in added.columns] == ["id", "total"]
    assert added.columns[-1].type == "text"


def test_add_field_passes_truncates() -> None:
    truncate = event(op=Op.TRUNCATE)
    assert one(chain(AddFieldConfig(field="x", value=1)), truncate) is truncate


def test_add_field_only_where_match_matches() -> None:
    add = chain(AddFieldConfig(match=r"public\.users", field="x", value=1))
    untouched = event("orders_1")
    assert one(add, untouched) is untouched
    assert one(add, event("users")).after == {"id": 7, "total": 10, "x": 1}


def test_matching_uses_the_routed_table() -> None:
    routed_then_added = chain(MERGE, AddFieldConfig(match=r"public\.orders", field="x", value=1))
    after = one(routed_then_added, event("orders_2")).after
    assert after is not None and after["x"] == 1
    assert routed_then_added.schema(shape("orders_2")).columns[-1].name == "x"


def test_transforms_edit_encoded_rows_without_changing_them() -> None:
    row = EncodedRow.of(b'{"id":7,"total":10}', {"id": 7, "total": 10})
    change = replace(event(), after=row)
    added = one(chain(MERGE, AddFieldConfig(field="x", value=1)), change)
    assert added.after == {"id": 7, "total": 10, DEBEZIUM_KEY_FIELD: "shop.public.orders_1", "x": 1}
    assert row.json == b'{"id":7,"total":10}'
    assert dict(row) == {"id": 7, "total": 10}


# -- the chain -------------------------------------------------------------------------------


class Twice:
    def apply(self, change: ChangeEvent) -> list[ChangeEvent]:
        return [change, replace(change, key={"id": -change.key["id"]})]


class Nothing:
    def apply(self, change: ChangeEvent) -> None:
        return None


class Wrong:
    def apply(self, change: ChangeEvent) -> Any:
        return {"op": "c"}


class Lazy:
    def apply(self, change: ChangeEvent) -> Any:
        return (e for e in [change])


class Boom:
    def apply(self, change: ChangeEvent) -> ChangeEvent:
        raise KeyError("missing")


class Counting:
    def __init__(self) -> None:
        self.seen: list[int] = []

    def apply(self, change: ChangeEvent) -> ChangeEvent:
        self.seen.append(change.key["id"])
        return change


def steps(*transforms: Any) -> TransformChain:
    config = TransformConfig(type="test")
    return TransformChain(
        [(f"transforms[{i}] (test)", config, t) for i, t in enumerate(transforms)]
    )


def test_chain_order_matters() -> None:
    rename = RenameFieldsConfig(fields={"region": "area"})
    add = AddFieldConfig(field="region", value="eu")
    assert one(chain(add, rename), event()).after == {"id": 7, "total": 10, "area": "eu"}
    assert one(chain(rename, add), event()).after == {"id": 7, "total": 10, "region": "eu"}


def test_fan_out_goes_through_the_next_transforms() -> None:
    counting = Counting()
    out = steps(Twice(), counting).apply(event())
    assert [e.key for e in out] == [{"id": 7}, {"id": -7}]
    assert counting.seen == [7, -7]


def test_none_drops_and_stops_the_chain() -> None:
    counting = Counting()
    assert steps(Nothing(), counting).apply(event()) == []
    assert counting.seen == []


def test_apply_all_keeps_order() -> None:
    out = steps(Twice()).apply_all([event(key=1), event(key=2)])
    assert [e.key["id"] for e in out] == [1, -1, 2, -2]


@pytest.mark.parametrize("transform", [Wrong(), Lazy()], ids=["dict", "generator"])
def test_a_wrong_return_type_is_a_transform_error(transform: Any) -> None:
    with pytest.raises(TransformError) as info:
        steps(transform).apply(event())
    assert "transforms[0] (test) returned" in str(info.value)
    assert "a ChangeEvent, a list of them, or None" in str(info.value)


def test_a_raising_transform_is_a_transform_error_naming_it() -> None:
    with pytest.raises(TransformError) as info:
        steps(Counting(), Boom()).apply(event())
    assert str(info.value) == (
        "transforms[1] (test) failed on a change of public.orders_1: KeyError: 'missing'"
    )


def test_empty_chain() -> None:
    empty = chain()
    change = event()
    assert not empty
    assert empty.apply(change) == [change]
    assert empty.table("public.x") == "public.x"
    assert empty.schema(shape()) == shape()


def test_chain_table_and_schema_follow_every_step() -> None:
    renames = chain(MERGE, RouteConfig(match=r"public\.orders", topic="sales.orders"))
    assert renames.table("public.orders_1") == "sales.orders"
    assert renames.table("public.users") == "public.users"
    routed = renames.schema(shape("orders_2"))
    assert (routed.schema, routed.table) == ("sales", "orders")
    assert one(renames, event("orders_2")).destination == ("sales", "orders")


def test_chain_protocol_only_transforms_have_the_defaults() -> None:
    bare = steps(Counting())
    assert bare.table("public.x") == "public.x"
    assert bare.schema(shape()) == shape()
    assert bare.unverifiable() == []


def test_a_new_event_drops_the_record_its_source_encoded() -> None:
    change = event()
    change.encoded = (
        PIPELINE,
        "shop.public.orders_1",
        b'{"id":7}',
        b'{"stale":true,"ts_ms":',
        b"}",
    )

    class Edit:
        def apply(self, given: ChangeEvent) -> ChangeEvent:
            return replace(given, after={"id": 7, "total": 99})

    [edited] = steps(Edit()).apply(change)
    assert edited.encoded is None
    [record] = records_of(edited)
    assert orjson.loads(record.value or b"")["after"] == {"id": 7, "total": 99}
    [same] = steps(Counting()).apply(change)
    assert same.encoded is change.encoded  # an event passed on as it is keeps its record


def test_transforms_do_not_change_the_event_given() -> None:
    change = event("orders_1", Op.UPDATE)
    before = copy.deepcopy(change)
    chain(
        MERGE,
        RenameFieldsConfig(fields={"total": "amount"}),
        AddFieldConfig(field="x", source="source.lsn"),
    ).apply(change)
    assert change == before


# -- fingerprints ----------------------------------------------------------------------------


def test_fingerprint_ignores_mapping_order_and_default_spelling() -> None:
    one_way = chain(RenameFieldsConfig(fields={"a": "b", "c": "d"}), MERGE)
    other_way = chain(
        RenameFieldsConfig.model_validate(
            {"type": "rename_fields", "fields": {"c": "d", "a": "b"}}
        ),
        RouteConfig(
            match=r"public\.orders_\d+", topic="public.orders", key_field=DEBEZIUM_KEY_FIELD
        ),
    )
    assert one_way.fingerprint() == other_way.fingerprint()


def test_fingerprint_differs_for_other_configs() -> None:
    prints = {
        chain().fingerprint(),
        chain(MERGE).fingerprint(),
        chain(MERGE.model_copy(update={"key_field": None})).fingerprint(),
        chain(AddFieldConfig(field="x", value=1)).fingerprint(),
        chain(AddFieldConfig(field="x", value="1")).fingerprint(),
        chain(MERGE, AddFieldConfig(field="x", value=1)).fingerprint(),
        chain(AddFieldConfig(field="x", value=1), MERGE).fingerprint(),
    }
    assert len(prints) == 7


def test_fingerprint_is_stable_across_builds() -> None:
    assert chain(MERGE).fingerprint() == chain(MERGE).fingerprint()
    assert chain(MERGE).fingerprint() == chain(MERGE, tables=("public.orders_9",)).fingerprint()
