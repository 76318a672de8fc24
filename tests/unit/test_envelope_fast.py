"""The envelope encoder put together from pieces writes exactly what orjson writes for the
envelope as a dict (``encode_value_dict``, the reference)."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import orjson

from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.envelope import encode as envelope
from cdc.envelope.encode import EncodedRow

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
        ts_us=rng.choice([None, 1_700_000_000_000_123]),
        order=rng.choice([None, '[null,"5"]', '["4","5"]']),
        table_fields=rng.choice([True, False]),
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


def _pre_encoded(event: ChangeEvent, pipeline: str) -> ChangeEvent:
    """``event`` with the record a source writes itself (what the PostgreSQL source does)."""
    src = event.source
    after = event.after
    row = after.json if isinstance(after, EncodedRow) else envelope.dumps(after)
    template = envelope.RecordTemplate.of(event.op, src, pipeline)
    order, extra = envelope.order_json(src.order), envelope.extra_json(src.extra)
    value = template.value_at(row, order, extra)
    topic = f"{pipeline}.{src.schema}.{src.table}"
    pos = template.pos(src.sequence)
    record = (pipeline, topic, envelope.encode_key(event.key), value, template.close, pos)
    return ChangeEvent(event.op, event.key, None, event.after, src, record)


def test_a_record_written_by_the_source_equals_the_dict_encoding() -> None:
    rng = random.Random(23)
    checked = 0
    for _ in range(3000):
        event = _event(rng)
        event.before, event.source.extra = None, {"lsn": rng.choice([0, 5, 2**63])}
        event.op = rng.choice([Op.CREATE, Op.UPDATE, Op.READ])
        event.source.position = rng.choice([0, 7, 2**63])
        # Records written by the source are the PostgreSQL stream's: its source block has the
        # table fields (one of its own, MongoDB's, never takes the template path).
        event.source.table_fields = True
        if event.after is None:
            continue
        pipeline = rng.choice(["shop", "p2"])
        now = rng.choice([0, 1_700_000_000_123])
        encoded = _pre_encoded(event, pipeline)
        [record] = envelope.to_records(encoded, pipeline, now)
        assert record.key == envelope.encode_key(event.key)
        assert record.value == envelope.encode_value_dict(event, pipeline, now), event
        assert record.pos == envelope.write_pos(event.source.position, event.source.sequence)
        assert envelope.batch_records([encoded], pipeline, now) == [record]
        checked += 1
    assert checked > 1000


def test_a_record_written_for_another_pipeline_is_encoded_again() -> None:
    rng = random.Random(29)
    event = _event(rng)
    event.op, event.before, event.after = Op.CREATE, None, {"id": 1}
    event.source.extra, event.source.position = {"lsn": 1}, 2
    encoded = _pre_encoded(event, "shop")
    [record] = envelope.to_records(encoded, "other", 5)
    assert record.topic.startswith("other.")
    assert record.value == envelope.encode_value_dict(event, "other", 5)
    assert envelope.batch_records([encoded], "other", 5) == [record]


def test_batch_records_equal_each_events_records() -> None:
    rng = random.Random(31)
    events = [_event(rng) for _ in range(200)]
    expected = [r for e in events for r in envelope.to_records(e, "shop", 3)]
    assert envelope.batch_records(events, "shop", 3) == expected
