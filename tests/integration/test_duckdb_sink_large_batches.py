"""A flush larger than :data:`sinks.duckdb.plan.TRANSACTION_BYTES` is applied in several
transactions, each storing the offsets of the records it applied: a record that fails in a later
one leaves the earlier ones applied with their offsets, and the retry skips them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdc.contracts.errors import RecordError
from cdc.contracts.events import Op
from cdc.log.base import TopicPartition
from sinks.duckdb.plan import TRANSACTION_BYTES, byte_parts
from tests.integration.duckdb_kit import Harness, item

VALUE = 1_000_000
FIRST = TRANSACTION_BYTES // VALUE  # records of the first transaction (16)
TOPIC = "shop.public.items"


@pytest.mark.parametrize("mode", ["current", "history"])
def test_a_failure_in_a_later_transaction_keeps_the_earlier_ones(tmp_path: Path, mode: str) -> None:
    h = Harness(tmp_path / "wh.duckdb", mode=mode)
    try:
        names = {k: os.urandom(VALUE // 2).hex() for k in range(20)}  # incompressible
        good = [item(Op.CREATE, k, k + 1, name=names[k], qty=k) for k in range(19)]
        bad = item(Op.CREATE, 19, 20, name=names[19], qty="nineteen")
        records = h.records(*good, bad)
        with pytest.raises(RecordError, match="qty"):
            h.write(records)
        assert h.sink.stored_offsets() == {TopicPartition(TOPIC, 0): FIRST}
        assert {k: r["name"] for k, r in h.rows().items()} == {k: names[k] for k in range(FIRST)}

        # The runner's retry, without the bad record: the applied ones are skipped.
        h.write(records[:-1])
        assert h.sink.stored_offsets() == {TopicPartition(TOPIC, 0): 19}
        rows = h.rows()
        assert {k: (r["name"], r["qty"]) for k, r in rows.items()} == {
            k: (names[k], k) for k in range(19)
        }
        if mode == "history":
            assert h.sql("SELECT count(*) FROM public.items__history") == [(19,)]
    finally:
        h.sink.close()


def test_the_bound_counts_bytes_not_characters(tmp_path: Path) -> None:
    """Values of 3-byte characters: a batch of 30 MB in UTF-8 but 10M characters is over the
    bound, so it is applied in byte parts, the earlier part kept when a later one fails. When
    the bound counted characters, the whole batch went into one transaction and the failure
    kept nothing."""
    h = Harness(tmp_path / "wh.duckdb", mode="current")
    try:
        names = {k: chr(0x4E00 + k) * VALUE for k in range(10)}  # 3 MB each in UTF-8
        good = [item(Op.CREATE, k, k + 1, name=names[k], qty=k) for k in range(9)]
        bad = item(Op.CREATE, 9, 10, name=names[9], qty="nine")
        records = h.records(*good, bad)
        first = byte_parts(records)[0].stop
        assert 0 < first < 9, first  # the batch is over the bound: the test tells
        with pytest.raises(RecordError, match="qty"):
            h.write(records)
        assert h.sink.stored_offsets() == {TopicPartition(TOPIC, 0): first}
        assert {k: r["name"] for k, r in h.rows().items()} == {k: names[k] for k in range(first)}
    finally:
        h.sink.close()
