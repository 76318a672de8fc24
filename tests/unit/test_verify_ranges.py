"""``cdc verify``'s range digests and bisection (:mod:`cdc.verify.ranges`), on generated
rows: the exact differing keys, and memory that does not grow with the table."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Iterator

import orjson
import pytest

from cdc.contracts.schema import Column, TableSchema
from cdc.verify import ranges
from cdc.verify.compare import compare_table
from cdc.verify.ranges import (
    Candidates,
    EntryReader,
    KeyFilter,
    compare_streams,
    key_hash,
    recheck,
)


def _entry(i: int, value: str) -> tuple[bytes, bytes]:
    return b'{"id":%d}' % i, b'{"id":%d,"v":"%s"}' % (i, value.encode())


def _side(
    n: int, tamper: dict[int, str | None] | None = None, extra: range = range(0)
) -> EntryReader:
    """Rows 0..n-1 (``tamper``: a changed value, or None: left out) and ``extra`` ones, read
    lazily in a shuffled-looking order (a sink's order is not the source's)."""
    changes = tamper or {}

    def read(wanted: KeyFilter | None = None) -> Iterator[Candidates]:
        for j in range(n):
            i = (j * 7919) % n if n % 7919 else j
            value = changes.get(i, f"row-{i}")
            if value is not None:
                yield (_entry(i, value),)
        for i in extra:
            yield (_entry(i, "added"),)

    return read


@pytest.fixture(params=["whole", "hashed"])
def leaves_held(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each comparison test runs with the differing leaves held whole and by hashes alone."""
    if request.param == "hashed":
        monkeypatch.setattr(ranges, "WHOLE_ROWS", 0)
    return str(request.param)


@pytest.mark.usefixtures("leaves_held")
def test_bisection_finds_exactly_the_tampered_keys() -> None:
    n = 50_000
    rng = random.Random(29)
    picked = rng.sample(range(n), 60)
    deleted, changed = set(picked[:30]), set(picked[30:])
    tamper: dict[int, str | None] = {i: None for i in deleted}
    tamper.update({i: "changed" for i in changed})
    found = compare_streams(_side(n), _side(n, tamper, extra=range(n, n + 7)))
    assert found.missing == {_entry(i, "")[0] for i in deleted}
    assert found.different == {_entry(i, "")[0] for i in changed}
    assert found.extra == {_entry(i, "")[0] for i in range(n, n + 7)}
    assert found.counts == [n, n - 30 + 7]
    # The first pass, the leaves compared (by hash: then the differing keys read whole): never
    # a pass per key.
    assert found.passes <= 3


def test_equal_sides_take_one_pass_and_agree() -> None:
    found = compare_streams(_side(20_000), _side(20_000))
    assert not found and found.passes == 0
    assert found.checksum(0) == found.checksum(1) and found.counts == [20_000, 20_000]


@pytest.mark.usefixtures("leaves_held")
def test_a_large_differing_range_is_cut_until_its_leaves_are_small(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Few top ranges, small leaves: the differing keys sit in ranges far above LEAF_ROWS.
    monkeypatch.setattr(ranges, "TOP_BITS", 2)
    monkeypatch.setattr(ranges, "LEAF_ROWS", 16)
    tamper: dict[int, str | None] = {5: "x", 17_000: None, 9_999: "y"}
    found = compare_streams(_side(20_000), _side(20_000, tamper))
    assert found.different == {_entry(5, "")[0], _entry(9_999, "")[0]}
    assert found.missing == {_entry(17_000, "")[0]}
    assert found.passes >= 2  # cut at least once before the leaves


@pytest.mark.usefixtures("leaves_held")
def test_keys_read_twice_count_once() -> None:
    # A SCAN may return a key twice; a keyless table's identical rows share one key.
    def twice(wanted: KeyFilter | None = None) -> Iterator[Candidates]:
        yield from _side(1000)(wanted)
        yield from _side(10)(wanted)

    found = compare_streams(twice, _side(1000))
    assert not found
    assert found.counts == [1000, 1000] and found.checksum(0) == found.checksum(1)


def test_recheck_looks_only_at_the_keys_asked_for() -> None:
    tamper: dict[int, str | None] = {3: "x", 4: None}
    keys = {key_hash(_entry(i, "")[0]) for i in (3, 4, 5)}
    found = recheck(_side(2000), _side(2000, tamper, extra=range(9000, 9001)), keys)
    assert found.different == {_entry(3, "")[0]} and found.missing == {_entry(4, "")[0]}
    assert not found.extra  # key 9000 differs, but was not asked for


def _peak(n: int) -> int:
    tamper: dict[int, str | None] = {i: "changed" for i in range(0, n, n // 20)}
    tracemalloc.start()
    try:
        found = compare_streams(_side(n), _side(n, tamper))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(found.different) == 20
    return peak


def test_memory_does_not_grow_with_the_table() -> None:
    # Holding a side as before (key and row bytes by key) took about 150 bytes a row: 15 MB
    # for 50,000 rows, both sides. The range digests take the same few hundred KB at any size.
    small, large = _peak(5_000), _peak(50_000)
    assert large < 2_000_000, f"{large:,} bytes at peak for 50,000 rows"
    assert large < small * 1.5 + 200_000, f"{small:,} -> {large:,} bytes"


def test_a_differing_leaf_holds_its_rows_hashes_not_the_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # At 10M rows a top range holds about 610 rows, ten times as many as at 1M. A leaf's rows
    # are compared by their hashes (16 bytes a row, about 50 more while a side is sorted), not
    # held whole: that took about 590 bytes a leaf row, both sides (2.96 MB for the 5,000-row
    # leaf here, 0.79 MB for the 1,250-row one). Four top ranges, one differing.
    monkeypatch.setattr(ranges, "TOP_BITS", 2)
    monkeypatch.setattr(ranges, "LEAF_ROWS", 1_000_000)
    monkeypatch.setattr(ranges, "WHOLE_ROWS", 1_000)  # each leaf here is larger

    def peak(n: int) -> int:
        first = [i for i in range(n) if key_hash(_entry(i, "")[0]) >> 62 == 0][:20]
        tracemalloc.start()
        try:
            found = compare_streams(_side(n), _side(n, dict.fromkeys(first, "changed")))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(found.different) == 20
        return peak

    small, large = peak(5_000), peak(20_000)
    assert small < 250_000, f"{small:,} bytes at peak for a 1,250-row leaf"
    assert large < 700_000, f"{large:,} bytes at peak for a 5,000-row leaf"


def test_differing_keys_are_found_by_hash_then_read_whole_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ranges, "WHOLE_ROWS", 0)
    tamper: dict[int, str | None] = {7: "x", 8: None}
    unresolved = compare_streams(_side(5000), _side(5000, tamper), resolve=False)
    assert not unresolved.different and not unresolved.missing  # hashes only, no row held
    assert unresolved.hashes["different"] == {key_hash(_entry(7, "")[0])}
    assert unresolved.hashes["missing"] == {key_hash(_entry(8, "")[0])}
    resolved = compare_streams(_side(5000), _side(5000, tamper))
    assert resolved.different == {_entry(7, "")[0]} and resolved.missing == {_entry(8, "")[0]}
    assert resolved.rows[_entry(7, "")[0]] == (_entry(7, "row-7")[1], _entry(7, "x")[1])
    assert resolved.passes == unresolved.passes + 1


def test_few_leaf_rows_are_held_whole_and_need_no_pass_to_read_them_again() -> None:
    tamper: dict[int, str | None] = {7: "x", 8: None}
    found = compare_streams(_side(5000), _side(5000, tamper), resolve=False)
    assert found.different == {_entry(7, "")[0]} and found.missing == {_entry(8, "")[0]}
    assert found.passes == 1  # the first pass's digests, then the leaves: nothing more


@pytest.mark.usefixtures("leaves_held")
@pytest.mark.parametrize("looks", [1, 3])
def test_a_key_missing_at_first_and_wrong_once_it_arrives_is_reported(looks: int) -> None:
    # The sink lacks key 7 during the first pass and the leaves' pass, then holds it with a
    # wrong value: it differed at every look, as missing and then as different.
    rows = [({"id": i}, {"id": i, "v": f"row-{i}"}) for i in range(3000)]
    reads = [0]

    def read_sink() -> list[tuple[dict[str, int], dict[str, object]]]:
        reads[0] += 1
        if reads[0] <= 2:
            return [r for r in rows if r[0]["id"] != 7]
        return [(k, {**r, "v": "wrong"}) if k["id"] == 7 else (k, r) for k, r in rows]

    result = compare_table("public.t", "s", SCHEMA, lambda: rows, read_sink, looks, wait_s=0)
    assert result.missing + result.different == [{"id": 7}], result  # not lost between kinds
    if looks > 1:  # under the kind of the last look
        assert result.different == [{"id": 7}], result


SCHEMA = TableSchema(
    "postgresql", "public", "t", (Column("id", "bigint", key=True), Column("v", "text"))
)


@pytest.mark.usefixtures("leaves_held")
def test_compare_table_reports_every_differing_key_for_repair() -> None:
    source = [({"id": i}, {"id": i, "v": f"r{i}"}) for i in range(3000)]
    sink = [(k, {**r, "v": "x"} if k["id"] % 100 == 0 else r) for k, r in source[:-5]]
    result = compare_table("public.t", "s", SCHEMA, lambda: source, lambda: sink, 1, limit=3)
    missing, extra, different = result.keys
    assert len(result.different) == 3 and len(different) == 30
    assert {orjson.loads(k)["id"] for k in missing} == set(range(2995, 3000))
    assert not extra and result.sink_count == 2995
