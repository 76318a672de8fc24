"""Classifying records for the key-value sinks (Redis, search): pure, no server."""

from __future__ import annotations

from typing import Any

import pytest

from cdc.contracts.errors import RecordError
from cdc.contracts.events import Op
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import SinkRecord
from sinks import keyed
from sinks.keyed import Kind, TopicTables, classify, key_suffix
from sinks.redis.script import encode_pos
from tests.integration.keyed_records import ITEMS, NOT_ENVELOPES, ORDERS, Records, event, item

TABLES = TopicTables("shop", [ITEMS, ORDERS])


def test_ops_become_kinds_with_positions_and_rows() -> None:
    records = Records()(
        item(Op.CREATE, 1, 10, name="a"),
        item(Op.UPDATE, 1, 11, name="b"),
        item(Op.READ, 2, 12),
        item(Op.DELETE, 1, 13),
        event(Op.TRUNCATE, {}, 14, ITEMS),
    )
    changes = [classify(r, TABLES) for r in records]
    kinds = [c.kind for c in changes]
    assert kinds == [Kind.UPSERT] * 3 + [Kind.DELETE, Kind.TOMBSTONE, Kind.TRUNCATE]
    assert [c.pos for c in changes] == [(10, 0), (11, 0), (12, 0), (13, 0), None, (14, 0)]
    assert changes[1].row == {"id": 1, "name": "b"} and changes[3].row is None
    assert changes[4].offset == 4 and changes[4].key == {"id": 1}
    assert {c.table for c in changes} == {ITEMS}


def test_a_topic_not_configured_is_read_from_its_name() -> None:
    record = SinkRecord("shop.sales.refunds", 0, 0, {"id": 1}, None)
    assert classify(record, TABLES).table == ("sales", "refunds")


@pytest.mark.parametrize("value", NOT_ENVELOPES)
def test_records_that_are_not_envelopes_are_record_errors(value: dict[str, Any]) -> None:
    record = SinkRecord("shop.public.items", 0, 7, {"id": 1}, value)
    with pytest.raises(RecordError) as caught:
        classify(record, TABLES)
    assert caught.value.record is record and "offset 7" in caught.value.reason


def test_key_suffix_joins_values_in_key_order() -> None:
    assert key_suffix({"id": 42}) == "42"
    assert key_suffix({"region": "eu", "no": 7}) == "eu:7"
    assert key_suffix({"no": 7, "region": "eu"}) == "7:eu"
    assert key_suffix({"flag": True}) == "true"
    assert key_suffix({"a": None, "b": 1.5}) == "null:1.5"
    assert key_suffix({"id": "x:y"}) == "x:y"


def test_encoded_positions_order_as_positions_do() -> None:
    positions = [(0, 0), (0, 9), (1, 0), (2**53 + 1, 0), (2**53 + 1, 1), (2**64 - 1, 5)]
    encoded = [encode_pos(p) for p in positions]
    assert sorted(encoded) == encoded and len(set(map(len, encoded))) == 1


def test_an_any_type_key_tells_each_value_from_the_string_of_its_text() -> None:
    # A MongoDB _id may be the number 5 in one document and the string "5" in another: under
    # any_type the two get two texts, while a typed column's string keeps its text as it is.
    values: list[Any] = [
        5, "5", 5.5, "5.5", True, "true", None, "null", "abc", "", '"abc"', "[1]", [1],
        {"$oid": "65a1b2c3d4e5f6a7b8c9d0e1"}, '{"$oid":"65a1b2c3d4e5f6a7b8c9d0e1"}',
        2**70, str(2**70), "NaN",
    ]  # fmt: skip
    texts = [key_suffix({"_id": v}, any_type=True) for v in values]
    assert len(set(texts)) == len(values), texts
    assert key_suffix({"_id": "abc"}, any_type=True) == "abc"
    assert key_suffix({"_id": "5"}, any_type=True) == '"5"'
    assert key_suffix({"_id": 5}, any_type=True) == "5"
    assert key_suffix({"id": "5"}) == "5"  # a typed (text) column: as it always was


def test_topic_tables_ask_the_schemas_once_which_tables_take_any_type_keys() -> None:
    asked: list[tuple[str, str]] = []
    shapes = {
        ("shop", "docs"): TableSchema("mongodb", "shop", "docs", (Column("_id", "", key=True),)),
        ("shop", "items"): TableSchema(
            "postgres", "shop", "items", (Column("id", "int", key=True),)
        ),
    }

    class Schemas:
        def get(self, schema: str, table: str) -> TableSchema | None:
            asked.append((schema, table))
            return shapes.get((schema, table))

    tables = TopicTables("shop", [], Schemas())
    for _ in range(3):
        assert tables.any_type_key(("shop", "docs"))
        assert not tables.any_type_key(("shop", "items"))
        assert not tables.any_type_key(("shop", "unknown"))
    assert asked == [("shop", "docs"), ("shop", "items"), ("shop", "unknown")]
    assert not TopicTables("shop", []).any_type_key(("shop", "docs"))


def test_a_schema_seen_late_is_learned_when_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # On Kafka a table's schema record may show after its first change (and past the catalog's
    # wait): the answer is not kept while the schema is unknown, and is asked again.
    shapes: dict[tuple[str, str], TableSchema] = {}

    class Schemas:
        def get(self, schema: str, table: str) -> TableSchema | None:
            return shapes.get((schema, table))

    tables = TopicTables("shop", [], Schemas())
    assert not tables.any_type_key(("shop", "docs"))
    shapes[("shop", "docs")] = TableSchema(
        "mongodb", "shop", "docs", (Column("_id", "", key=True),)
    )
    assert not tables.any_type_key(("shop", "docs"))  # not asked again at once
    monkeypatch.setattr(keyed, "ASK_AGAIN_S", 0.0)
    assert tables.any_type_key(("shop", "docs"))
