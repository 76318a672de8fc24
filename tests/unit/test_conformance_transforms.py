"""The transform conformance kit run against the three built-in transforms, which shows the
kit can pass, and against broken transforms, which shows it can fail."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from cdc.contracts.events import ChangeEvent, Op, SourceInfo, topic_name
from cdc.envelope.connect_schema import inferred_schemas
from cdc.envelope.json_rows import EncodedRow
from cdc.testing import TransformConformance
from cdc.testing.transforms import PIPELINE
from cdc.transforms import BaseTransform, Transform, TransformContext
from cdc.transforms.fields import (
    AddFieldConfig,
    AddFieldPlugin,
    RenameFieldsConfig,
    RenameFieldsPlugin,
)
from cdc.transforms.route import RouteConfig, RoutePlugin


def change(
    table: str,
    op: Op,
    key: int,
    position: int,
    encoded_row: bool = False,
    typed: bool = False,
) -> ChangeEvent:
    """A change of ``public.<table>`` as the PostgreSQL source gives it."""
    source = SourceInfo(
        "postgresql", "db", "public", table, 1_700_000_000_000, position, key, tx_id=position,
        extra={"lsn": position * 8, "xmin": None},
    )  # fmt: skip
    row: dict[str, Any] = {"id": key, "email": f"u{key}@example.test", "qty": key * 2}
    if op is Op.TRUNCATE:
        truncate = ChangeEvent(op, {}, None, None, source)
        truncate.connect = inferred_schemas(
            topic_name(PIPELINE, "public", table), "postgresql", row, {"id": key}, {}, True
        )
        return truncate
    image: Any = EncodedRow.of(orjson_bytes(row), row) if encoded_row else row
    before, after = (image, None) if op is Op.DELETE else (None, image)
    if op is Op.UPDATE:
        before = dict(row)
    event = ChangeEvent(op, {"id": key}, before, after, source)
    if typed:
        topic = topic_name(PIPELINE, "public", table)
        event.connect = inferred_schemas(topic, "postgresql", row, {"id": key}, {}, True)
    return event


def orjson_bytes(row: dict[str, Any]) -> bytes:
    import orjson

    return orjson.dumps(row)


def every_op(table: str, first: int, truncate: bool = True) -> list[ChangeEvent]:
    events = [
        change(table, Op.READ, first, 10),
        change(table, Op.CREATE, first + 1, 11, encoded_row=True),
        change(table, Op.UPDATE, first, 12, typed=True),
        change(table, Op.DELETE, first + 1, 13, encoded_row=True, typed=True),
    ]
    if truncate:
        events.append(change(table, Op.TRUNCATE, 0, 14))
    return events


def mongo_events(collection: str) -> list[ChangeEvent]:
    """Changes of ``shop.<collection>`` as the MongoDB source gives them: documents as
    :class:`EncodedRow` STRICT text, its source block and Connect schemas."""
    from bson import ObjectId

    from connectors.mongodb import records
    from connectors.mongodb.connect import Schemas

    def source(position: int) -> SourceInfo:
        extra = records.source_extra(collection, 1_700_000_000_000, position)
        return SourceInfo(
            "mongodb", "shop", "shop", collection, 1_700_000_000_000, position, 0,
            extra=extra, table_fields=False,
        )  # fmt: skip

    doc = {"_id": ObjectId("65a1b2c3d4e5f60718293a4b"), "name": "n", "qty": 2}
    key = records.key(doc["_id"])
    events = [
        ChangeEvent(Op.READ, key, None, records.row(doc), source(1)),
        ChangeEvent(Op.UPDATE, key, None, records.row({**doc, "qty": 3}), source(2)),
        ChangeEvent(Op.DELETE, key, None, None, source(3)),
        ChangeEvent(Op.TRUNCATE, {}, None, None, source(4)),
    ]
    for event in events:
        event.fields = {"updateDescription": None}
    Schemas(PIPELINE).attach(events)
    return events


class TestRouteMergeConformance(TransformConformance):
    config_model = RouteConfig
    config = {"type": "route", "match": r"public\.orders_\d+", "topic": "public.orders"}

    def make_transform(self, context: TransformContext) -> Transform:
        return RoutePlugin.create(RouteConfig.model_validate(self.config), context)

    def sample_events(self) -> Sequence[ChangeEvent]:
        # Truncates of merged shards are refused (a transform error), so none is sampled.
        return [
            *every_op("orders_1", 1, truncate=False),
            *every_op("orders_2", 1, truncate=False),
            *every_op("users", 1),
        ]


class TestRouteAloneConformance(TransformConformance):
    config_model = RouteConfig
    config = {"type": "route", "match": r"public\.users", "topic": "crm.people", "key_field": None}

    def make_transform(self, context: TransformContext) -> Transform:
        return RoutePlugin.create(RouteConfig.model_validate(self.config), context)

    def sample_events(self) -> Sequence[ChangeEvent]:
        return [*every_op("users", 1), *every_op("orders_1", 5)]


class TestRenameFieldsConformance(TransformConformance):
    config_model = RenameFieldsConfig
    config = {"type": "rename_fields", "match": r"public\.users", "fields": {"id": "user_id"}}

    def make_transform(self, context: TransformContext) -> Transform:
        return RenameFieldsPlugin.create(RenameFieldsConfig.model_validate(self.config), context)

    def sample_events(self) -> Sequence[ChangeEvent]:
        return [*every_op("users", 1), *every_op("orders_1", 5)]


class TestAddFieldConformance(TransformConformance):
    config_model = AddFieldConfig
    config = {"type": "add_field", "field": "committed_ms", "source": "source.ts_ms"}

    def make_transform(self, context: TransformContext) -> Transform:
        return AddFieldPlugin.create(AddFieldConfig.model_validate(self.config), context)

    def sample_events(self) -> Sequence[ChangeEvent]:
        return every_op("users", 1)


class TestAddConstantConformance(TestAddFieldConformance):
    config = {"type": "add_field", "match": r"public\.users", "field": "region", "value": "eu"}

    def sample_events(self) -> Sequence[ChangeEvent]:
        return [*every_op("users", 1), *every_op("orders_1", 5)]


# -- the kit fails broken transforms ---------------------------------------------------------


class Mutating(BaseTransform):
    """Writes into the row it was given."""

    def apply(self, event: ChangeEvent) -> ChangeEvent:
        if isinstance(event.after, dict):
            event.after["flag"] = True
        return event


class Repositioning(BaseTransform):
    """Gives the events it returns a new source position."""

    def apply(self, event: ChangeEvent) -> ChangeEvent:
        return replace(event, source=replace(event.source, position=0))


class SilentRouter(BaseTransform):
    """Sends events elsewhere without saying so in table() or schema()."""

    def apply(self, event: ChangeEvent) -> ChangeEvent:
        return replace(event, destination=("other", "place"), encoded=None)


class UndeclaredField(BaseTransform):
    """Adds a field its schema() does not know."""

    def apply(self, event: ChangeEvent) -> ChangeEvent:
        after = None if event.after is None else {**event.after, "extra": 1}
        return replace(event, after=after, encoded=None)


class StaleConnectSchema(BaseTransform):
    """Renames the topic but keeps the Connect schemas named after the old one."""

    def table(self, table: str) -> str:
        return "other.place"

    def schema(self, schema: Any) -> Any:
        return replace(schema, schema="other", table="place")

    def apply(self, event: ChangeEvent) -> ChangeEvent:
        return replace(event, destination=("other", "place"), encoded=None)


class Random(BaseTransform):
    def __init__(self) -> None:
        self.calls = 0

    def apply(self, event: ChangeEvent) -> ChangeEvent:
        self.calls += 1
        after = None if event.after is None else {**event.after, "id": self.calls}
        return replace(event, after=after)


class WrongType(BaseTransform):
    def apply(self, event: ChangeEvent) -> Any:
        return [event, "not an event"]


def kit_with(transform: BaseTransform) -> TransformConformance:
    class Broken(TransformConformance):
        def make_transform(self, context: TransformContext) -> Transform:
            return transform

        def sample_events(self) -> Sequence[ChangeEvent]:
            return every_op("users", 1)

    return Broken()


@pytest.mark.parametrize(
    ("transform", "check"),
    [
        (Mutating(), "test_kit_does_not_change_the_event_it_is_given"),
        (Repositioning(), "test_kit_keeps_source_position_and_sequence"),
        (SilentRouter(), "test_kit_table_agrees_with_apply"),
        (SilentRouter(), "test_kit_schema_covers_the_rows_it_returns"),
        (UndeclaredField(), "test_kit_schema_covers_the_rows_it_returns"),
        (StaleConnectSchema(), "test_kit_events_encode_with_schemas"),
        (Random(), "test_kit_is_deterministic"),
        (WrongType(), "test_kit_returns_events_a_list_or_none"),
    ],
    ids=[
        "mutates-input",
        "moves-position",
        "table-disagrees",
        "schema-names-another-table",
        "schema-lacks-a-field",
        "stale-connect-schema",
        "not-deterministic",
        "wrong-type",
    ],
)
def test_the_kit_catches(transform: BaseTransform, check: str) -> None:
    kit = kit_with(transform)
    with pytest.raises(AssertionError):
        getattr(kit, check)()


def test_the_kit_catches_a_config_model_that_takes_unknown_keys() -> None:
    class Lenient(RouteConfig):
        model_config = {**RouteConfig.model_config, "extra": "ignore"}

    class Kit(TestRouteMergeConformance):
        config_model = Lenient

    with pytest.raises(AssertionError, match="accepts keys it does not know"):
        Kit().test_kit_config_model_rejects_unknown_keys()


class TestRouteMongoConformance(TestRouteMergeConformance):
    config = {"type": "route", "match": r"shop\.orders_\d+", "topic": "shop.orders"}

    def sample_events(self) -> Sequence[ChangeEvent]:
        shards = [e for e in mongo_events("orders_1") if e.op is not Op.TRUNCATE]
        return [*shards, *mongo_events("orders_2")[:2], *mongo_events("users")]


class TestRenameFieldsMongoConformance(TestRenameFieldsConformance):
    config = {"type": "rename_fields", "fields": {"qty": "quantity"}}

    def sample_events(self) -> Sequence[ChangeEvent]:
        return mongo_events("users")


class TestAddFieldMongoConformance(TestAddFieldConformance):
    config = {"type": "add_field", "field": "collection", "source": "source.collection"}

    def sample_events(self) -> Sequence[ChangeEvent]:
        return mongo_events("users")
