"""The Redis sink's one-pass encoding of a batch (sinks.redis.batch): pure, no server.

Checked against what classifying each record (:func:`sinks.keyed.classify`) says it is, so
the fast path keeps the classifier's meaning and its errors.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from cdc.contracts.errors import RecordError
from cdc.contracts.events import Op
from cdc.contracts.sink import SinkRecord
from sinks.keyed import Change, Kind, TopicTables, classify, key_suffix
from sinks.redis import batch
from sinks.redis.batch import segments
from sinks.redis.script import encode_pos
from tests.integration.keyed_records import ITEMS, NOT_ENVELOPES, ORDERS, Records, event, item

TABLES = TopicTables("shop", [ITEMS, ORDERS])
_OPS = {Kind.UPSERT: "s", Kind.DELETE: "d", Kind.TOMBSTONE: "x"}


def expected_entry(change: Change) -> tuple[str, str, str, str, str]:
    """An entry as the script reads it (without its table number), from the classified change."""
    if change.kind is Kind.UPSERT:
        extra = orjson.dumps(change.row).decode()
    else:
        extra = f"{change.offset + 1:015d}" if change.kind is Kind.DELETE else ""
    return (
        _OPS[change.kind],
        key_suffix(change.key),
        encode_pos(change.pos),
        f"{change.offset:015d}",
        extra,
    )


def workload() -> list[SinkRecord]:
    return Records()(
        item(Op.CREATE, 1, 10, name="a", qty=3),
        event(Op.CREATE, {"region": "eu", "no": 7}, 11, ORDERS, note="x"),
        item(Op.UPDATE, 1, 12, name="b"),
        item(Op.READ, 2, 13),
        event(Op.UPDATE, {"region": "eu", "no": 7}, 14, ORDERS, seq=3, note="y"),
        item(Op.DELETE, 1, 15),
        event(Op.TRUNCATE, {}, 16, ITEMS),
        item(Op.CREATE, 3, 17, name="c"),
        event(Op.DELETE, {"region": "eu", "no": 7}, 18, ORDERS),
    )


def test_entries_say_what_classifying_each_record_says() -> None:
    records = workload()
    changes = [classify(r, TABLES) for r in records]
    built = segments(records, TABLES)
    truncates = [c for c in changes if c.kind is Kind.TRUNCATE]
    assert [s.truncate for s in built[:-1]] == truncates and built[-1].truncate is None
    entries, tables = [], []
    for segment in built:
        for chunk in segment.chunks:
            numbered = {n: t for t, n in chunk.tables.items()}
            assert sorted(numbered) == list(range(1, len(numbered) + 1))
            for code, number, *rest in chunk.entries:
                entries.append((code, *rest))
                tables.append(numbered[number])
    kept = [c for c in changes if c.kind is not Kind.TRUNCATE]
    assert entries == [expected_entry(c) for c in kept]
    assert tables == [c.table for c in kept]


def test_chunks_hold_at_most_chunk_changes_and_number_their_own_tables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch, "CHUNK", 2)
    records = Records()(*(item(Op.CREATE, n, 10 + n) for n in range(5)))
    (segment,) = segments(records, TABLES)
    assert [len(c.entries) for c in segment.chunks] == [2, 2, 1]
    assert all(c.tables == {ITEMS: 1} for c in segment.chunks)


def test_a_truncate_first_leaves_an_empty_segment_before_it() -> None:
    records = Records()(event(Op.TRUNCATE, {}, 16, ITEMS), item(Op.CREATE, 3, 17))
    first, second = segments(records, TABLES)
    assert first.chunks == [] and first.truncate is not None and first.truncate.pos == (16, 0)
    assert [e[0] for c in second.chunks for e in c.entries] == ["s"]


@pytest.mark.parametrize("value", NOT_ENVELOPES)
def test_records_that_are_not_envelopes_are_the_classifiers_errors(value: dict[str, Any]) -> None:
    record = SinkRecord("shop.public.items", 0, 7, {"id": 1}, value)
    with pytest.raises(RecordError) as expected:
        classify(record, TABLES)
    with pytest.raises(RecordError) as caught:
        segments([record], TABLES)
    assert caught.value.record is record and caught.value.reason == expected.value.reason
