"""Chunk planning and bookkeeping, without a server."""

from __future__ import annotations

import pytest

from snapshots.chunks import (
    KeyChunk,
    PageChunk,
    add_done,
    chunk_from_json,
    chunk_to_json,
    done_count,
    expand,
    key_chunks,
    page_chunks,
    rate_and_eta,
    remaining,
    to_ranges,
)


def test_key_chunks_cover_the_whole_key_space_without_overlap() -> None:
    chunks = key_chunks([("10",), ("20",)])
    assert chunks == [
        KeyChunk(0, None, ("10",)),
        KeyChunk(1, ("10",), ("20",)),
        KeyChunk(2, ("20",), None),
    ]


def test_an_empty_table_is_one_open_chunk() -> None:
    assert key_chunks([]) == [KeyChunk(0, None, None)]


def test_page_chunks_are_sized_from_the_row_estimate_and_the_last_is_open() -> None:
    chunks = page_chunks(pages=100, rows_estimate=10_000, chunk_rows=2_500)
    assert [(c.first_page, c.end_page) for c in chunks] == [
        (0, 25),
        (25, 50),
        (50, 75),
        (75, None),
    ]


@pytest.mark.parametrize(("pages", "estimate"), [(0, 0.0), (0, -1.0)])
def test_an_empty_heap_is_one_open_page_chunk(pages: int, estimate: float) -> None:
    assert page_chunks(pages, estimate, 1000) == [PageChunk(0, 0, None)]


def test_unknown_estimates_still_give_chunks() -> None:
    chunks = page_chunks(pages=10, rows_estimate=-1, chunk_rows=300)
    assert chunks[0] == PageChunk(0, 0, 3)
    assert chunks[-1].end_page is None


@pytest.mark.parametrize(
    "chunk",
    [
        KeyChunk(3, ("a", "1"), ("b", "2")),
        KeyChunk(0, None, ("5",)),
        KeyChunk(9, ("5",), None),
        PageChunk(2, 40, 80),
        PageChunk(3, 80, None),
    ],
)
def test_chunks_survive_their_stored_form(chunk: KeyChunk | PageChunk) -> None:
    assert chunk_from_json(chunk_to_json(chunk)) == chunk


def test_done_ranges_merge_and_count() -> None:
    ranges: list[list[int]] = []
    for index in (3, 0, 1, 7, 2):
        ranges = add_done(ranges, index)
    assert ranges == [[0, 3], [7, 7]]
    assert done_count(ranges) == 5
    assert expand(ranges) == [0, 1, 2, 3, 7]
    assert to_ranges([5, 5, 6]) == [[5, 6]]


def test_remaining_keeps_plan_order() -> None:
    chunks = key_chunks([("1",), ("2",), ("3",)])
    left = remaining(chunks, [[0, 1]])
    assert [c.index for c in left] == [2, 3]


def test_rate_and_eta_scale_by_chunks() -> None:
    rate, eta = rate_and_eta(rows=1000, elapsed_s=2.0, chunks_done=1, chunks_total=4)
    assert rate == 500.0
    assert eta == 6.0
    assert rate_and_eta(0, 1.0, 0, 4) == (0.0, None)
