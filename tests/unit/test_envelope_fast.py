"""The envelope encoder put together from pieces writes exactly what orjson writes for the
envelope as a dict (``encode_value_dict``, the reference)."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import orjson

from cdc import envelope
from cdc.events import ChangeEvent, EncodedRow, Op, SourceInfo

ROWS: list[Any] = [
    None,
    {},
    {"id": 1, "name": 'ünïcödé ✓ "q" \\ \n', "n": Decimal("1.50"), "b": b"\x00\xff"},
    {"nested": {"list": [1, "two", None, 2.5]}, "big": orjson.Fragment(b"12345678901234567890")},
    EncodedRow(b'{"id":7,"t":"x"}', None, lambda raw: {"id": 7, "t": "x"}),
]
EXTRAS: list[dict[str, Any]] = [
    {},
    {"lsn": 123456789},
    {"lsn": 1, "toast_fallback": True, "toast_fallback_columns": ["a", "b"]},
    {"ord": 3, "collection": "orders", "txnNumber": 9, "lsid": {"id": {"$binary": "x"}}},
    {"snapshot": "overridden"},  # a base key: the dict path keeps its place
]


def _event(rng: random.Random) -> ChangeEvent:
    source = SourceInfo(
        connector=rng.choice(["postgresql", "mongodb"]),
        db=rng.choice(["shop", 'we"ird', "dé"]),
        schema=rng.choice(["public", "s p"]),
        table=rng.choice(["orders", "ta\tble"]),
        ts_ms=rng.choice([0, 1_700_000_000_000]),
        position=rng.choice([0, 2**63, 123, "resume-token"]),  # type: ignore[arg-type]
        sequence=rng.choice([0, 5, 2**40]),
        snapshot=rng.choice(["false", "true", "last"]),
        tx_id=rng.choice([None, 777]),
        extra=dict(rng.choice(EXTRAS)),
    )
    return ChangeEvent(rng.choice(list(Op)), {"id": 1}, rng.choice(ROWS), rng.choice(ROWS), source)


def test_pieces_equal_the_dict_encoding() -> None:
    rng = random.Random(17)
    for _ in range(5000):
        event = _event(rng)
        pipeline = rng.choice(["shop", "p2"])
        now = rng.choice([0, 1_700_000_000_123])
        assert envelope.encode_value(event, pipeline, now) == envelope.encode_value_dict(
            event, pipeline, now
        ), event


def test_consecutive_changes_share_the_head_correctly() -> None:
    rng = random.Random(5)
    events = [_event(rng) for _ in range(50)]
    for event in events * 3:  # the one-entry cache switches between tables and transactions
        assert envelope.encode_value(event, "shop", 1) == envelope.encode_value_dict(
            event, "shop", 1
        )


def test_records_of_a_delete_are_the_change_and_a_tombstone() -> None:
    rng = random.Random(9)
    event = _event(rng)
    event.op = Op.DELETE
    records = envelope.to_records(event, "shop", 1)
    topic = f"shop.{event.source.schema}.{event.source.table}"
    assert [(r.topic, r.key) for r in records] == [(topic, b'{"id":1}')] * 2
    assert records[0].value == envelope.encode_value_dict(event, "shop", 1)
    assert records[1].value is None
