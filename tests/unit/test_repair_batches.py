"""``cdc verify --repair``'s requests of a table's differing keys (:func:`batches`): at most
``BATCH_KEYS`` keys and ``BATCH_BYTES`` bytes of their JSON a request, every key once, in
order (the stored offsets keep a running request's keys with every commit)."""

from __future__ import annotations

import orjson

from cdc.cli.verify.repair import BATCH_BYTES, BATCH_KEYS, batches


def _keys(count: int, width: int) -> list[bytes]:
    return [orjson.dumps({"_id": f"{n:0{width}d}"}) for n in range(count)]


def test_many_small_keys_are_cut_by_count() -> None:
    keys = _keys(2500, 4)
    cut = list(batches(keys))
    assert [len(b) for b in cut] == [BATCH_KEYS, BATCH_KEYS, 500]
    assert [orjson.dumps(k) for b in cut for k in b] == keys


def test_long_keys_are_cut_by_bytes() -> None:
    keys = _keys(300, 1000)  # about 1 KB a key: 300 KB in all
    cut = list(batches(keys))
    assert len(cut) == 3
    assert all(sum(len(orjson.dumps(k)) for k in b) <= BATCH_BYTES for b in cut)
    assert [orjson.dumps(k) for b in cut for k in b] == keys


def test_a_key_longer_than_the_bound_goes_alone() -> None:
    keys = [b'{"_id":"a"}', orjson.dumps({"_id": "x" * BATCH_BYTES}), b'{"_id":"b"}']
    assert [len(b) for b in batches(keys)] == [1, 1, 1]
