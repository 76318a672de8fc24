"""Chunk planning and chunk bookkeeping, as pure functions over plain data.

A table is read in chunks so that workers can read it in parallel and a crash loses at most the
chunks in flight. Two kinds:

* :class:`KeyChunk`: a keyset range ``lo < key <= hi`` over the primary key (or the configured
  snapshot key columns). ``lo`` is ``None`` for the first chunk and ``hi`` is ``None`` for the
  last, so rows inserted beyond the planned boundaries still belong to a chunk.
* :class:`PageChunk`: a ``ctid`` page range ``first_page <= page < end_page`` for a table
  without any key; the last chunk is open-ended for the same reason.

Key values travel as their text form (what ``key::text`` gives): they are stored in the log's
source offsets as JSON and go back to the server as untyped parameters, which it casts to the
column's type.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# The stored form's own count (its one codec); chunk bookkeeping uses it as is.
from cdc.contracts.snapshot_offsets import done_count as done_count

KeyValues = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KeyChunk:
    """Rows with ``lo < key <= hi`` (row comparison over the key columns)."""

    index: int
    lo: KeyValues | None
    hi: KeyValues | None


@dataclass(frozen=True, slots=True)
class PageChunk:
    """Rows on heap pages ``first_page <= page < end_page`` (``None``: to the end)."""

    index: int
    first_page: int
    end_page: int | None


Chunk = KeyChunk | PageChunk


def key_chunks(boundaries: Sequence[KeyValues]) -> list[KeyChunk]:
    """Keyset chunks from sorted, distinct upper boundaries.

    ``n`` boundaries give ``n + 1`` chunks: ``(None, b0], (b0, b1], ..., (b[n-1], None)``. An
    empty table (no boundaries) is one open chunk, which reads whatever is there.
    """
    edges: list[KeyValues | None] = [None, *boundaries, None]
    return [KeyChunk(i, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def page_chunks(pages: int, rows_estimate: float, chunk_rows: int) -> list[PageChunk]:
    """``ctid`` page ranges holding about ``chunk_rows`` rows each.

    Args:
        pages: the table's current heap pages.
        rows_estimate: ``reltuples`` (or any estimate; ``<= 0`` means unknown).
        chunk_rows: rows wanted per chunk.
    """
    if pages <= 0:
        return [PageChunk(0, 0, None)]
    per_page = rows_estimate / pages if rows_estimate > 0 else 100.0
    step = max(1, math.floor(chunk_rows / max(per_page, 1e-9)))
    starts = list(range(0, pages, step))
    ends: list[int | None] = [*starts[1:], None]
    return [PageChunk(i, s, e) for i, (s, e) in enumerate(zip(starts, ends, strict=True))]


# -- JSON (stored in the log's source offsets) ------------------------------------------------


def chunk_to_json(chunk: Chunk) -> dict[str, Any]:
    """The stored form of a chunk."""
    if isinstance(chunk, KeyChunk):
        return {
            "i": chunk.index,
            "lo": None if chunk.lo is None else list(chunk.lo),
            "hi": None if chunk.hi is None else list(chunk.hi),
        }
    return {"i": chunk.index, "pages": [chunk.first_page, chunk.end_page]}


def chunk_from_json(data: dict[str, Any]) -> Chunk:
    """The chunk stored by :func:`chunk_to_json`."""
    if "pages" in data:
        first, end = data["pages"]
        return PageChunk(int(data["i"]), int(first), None if end is None else int(end))
    lo, hi = data.get("lo"), data.get("hi")
    return KeyChunk(
        int(data["i"]),
        None if lo is None else tuple(str(v) for v in lo),
        None if hi is None else tuple(str(v) for v in hi),
    )


# -- which chunks are done: sorted, merged [first, last] ranges --------------------------------


def add_done(ranges: Sequence[Sequence[int]], index: int) -> list[list[int]]:
    """``ranges`` with ``index`` added, merged so the stored list stays short."""
    return to_ranges([*expand(ranges), index])


def to_ranges(indexes: Iterable[int]) -> list[list[int]]:
    """Sorted, merged inclusive ranges of ``indexes`` (``[1, 2, 3, 7]`` -> ``[[1, 3], [7, 7]]``)."""
    out: list[list[int]] = []
    for i in sorted(set(indexes)):
        if out and out[-1][1] == i - 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def expand(ranges: Sequence[Sequence[int]]) -> list[int]:
    """Every index in ``ranges``."""
    return [i for first, last in ranges for i in range(int(first), int(last) + 1)]


def remaining(chunks: Sequence[Chunk], ranges: Sequence[Sequence[int]]) -> list[Chunk]:
    """The chunks not yet done, in plan order."""
    done = set(expand(ranges))
    return [c for c in chunks if c.index not in done]


# -- progress figures ---------------------------------------------------------------------------


def rate_and_eta(
    rows: int, elapsed_s: float, chunks_done: int, chunks_total: int
) -> tuple[float, float | None]:
    """Rows per second so far, and the seconds left if the remaining chunks go as fast.

    The ETA scales by chunks, not rows: the row total of a table is only estimated, its chunk
    count is exact.
    """
    if elapsed_s <= 0 or rows <= 0:
        return 0.0, None
    rate = rows / elapsed_s
    if chunks_done <= 0:
        return rate, None
    left = max(0, chunks_total - chunks_done)
    return rate, elapsed_s * left / chunks_done
