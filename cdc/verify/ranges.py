"""Compare two streams of canonical rows in memory that does not grow with the table.

Each row's canonical key JSON is hashed to 64 bits (BLAKE2b); the hash space is cut into
ranges. A pass streams both sides once, in any order (a Redis SCAN has none), and sums per
range an order-independent digest: the count of rows and the sum, mod 2**64, of a 64-bit hash
of ``key + NUL + row``. Ranges whose digests differ are cut again (:data:`STEP_BITS` more bits of
the hash) in the next pass, until a differing range holds at most :data:`LEAF_ROWS` rows on
each side: then its rows are held and compared key by key. Memory is the ranges' digests plus
the rows of the differing leaves of one pass (at most about :data:`PASS_ROWS`), whatever the
table's size; a table of which every row differs costs more passes, never more memory (beyond
the differing keys themselves, which a repair needs).

A key read twice on one side (a keyless table's identical rows, a SCAN's repeats) makes its
range differ; its leaf holds the key once, as the former in-memory comparison did, and the
counts and checksums are corrected by what the leaves found.
"""

from __future__ import annotations

import hashlib
import heapq
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

#: A row as compared: its canonical key JSON and canonical row JSON.
Entry = tuple[bytes, bytes]
#: One row read from a side: the entries it may stand for, its own first (a sink that keeps
#: rows as several envelope eras encoded them gives one per era, see :mod:`.compare`).
Candidates = Sequence[Entry]
#: Whether a pass needs a row, by its canonical key JSON: a reader may skip the others before
#: it canonicalises their whole row (an optimisation only: a pass checks every row it gets).
KeyFilter = Callable[[bytes], bool]
#: Reads a side from its start, each call a new stream; with a filter, it may leave out the
#: rows the filter refuses.
EntryReader = Callable[[KeyFilter | None], Iterable[Candidates]]

HASH_BITS = 64
# 16,384 ranges in the first pass (256 KB of digests a side): up to about 16M rows a differing
# range holds at most LEAF_ROWS, compared at once, so a difference costs one more pass, not two.
TOP_BITS = 14
STEP_BITS = 8  # a differing range is cut 256 ways
LEAF_ROWS = 1024
PASS_ROWS = 100_000
SPLITS_PER_PASS = 512  # ranges cut in one pass: at most 512 * 256 digests held
DETAILED = 5
_MASK = (1 << HASH_BITS) - 1


def key_hash(key: bytes) -> int:
    """The key's place in the hash space (both sides must agree: the key alone)."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def row_hash(key: bytes, row: bytes) -> int:
    """A row's term of the digest sum (the checksum ``cdc verify`` has always printed)."""
    return int.from_bytes(hashlib.blake2b(key + b"\0" + row, digest_size=8).digest(), "big")


Range = tuple[int, int]  # (bits, prefix): the hashes whose top ``bits`` bits are ``prefix``


def in_range(key: bytes, at: Range) -> bool:
    """Whether canonical key JSON ``key`` hashes into range ``at``."""
    bits, prefix = at
    return key_hash(key) >> (HASH_BITS - bits) == prefix if bits else True


@dataclass
class Found:
    """What a comparison found: the differing keys (canonical key JSON), the rows of the first
    few different keys (in key order), each side's count and checksum of distinct keys."""

    missing: set[bytes] = field(default_factory=set)
    extra: set[bytes] = field(default_factory=set)
    different: set[bytes] = field(default_factory=set)
    rows: dict[bytes, tuple[bytes, bytes]] = field(default_factory=dict)
    counts: list[int] = field(default_factory=lambda: [0, 0])
    sums: list[int] = field(default_factory=lambda: [0, 0])
    passes: int = 0

    def __bool__(self) -> bool:
        return bool(self.missing or self.extra or self.different)

    def checksum(self, side: int) -> str:
        return f"{self.sums[side] & _MASK:016x}"


def compare_streams(source: EntryReader, sink: EntryReader) -> Found:
    """Every key that is missing in, extra in, or different in ``sink``, found by range
    digests and bisection; counts and checksums of both sides."""
    found = Found()
    digests = [_top_digests(read, found, side) for side, read in enumerate((source, sink))]
    splits: list[Range] = []
    leaves: list[tuple[Range, int]] = []
    size = 1 << TOP_BITS
    top = [(TOP_BITS, p) for p in range(size) if _at(digests[0], p) != _at(digests[1], p)]
    sizes = {r: max(digests[0][0][r[1]], digests[1][0][r[1]]) for r in top}
    _sort_ranges(top, sizes, splits, leaves)
    while splits or leaves:
        now_split, splits = splits[:SPLITS_PER_PASS], splits[SPLITS_PER_PASS:]
        now_leaves, leaves = _take_leaves(leaves)
        sub = _pass(source, sink, now_split, [r for r, _ in now_leaves], found)
        differing = [r for r, d in sub[0].items() if d != sub[1].get(r)]
        differing += [r for r in sub[1] if r not in sub[0]]
        sizes = {r: max(sub[0].get(r, (0, 0))[0], sub[1].get(r, (0, 0))[0]) for r in differing}
        _sort_ranges(differing, sizes, splits, leaves)
    return found


def recheck(source: EntryReader, sink: EntryReader, keys: Iterable[bytes]) -> Found:
    """Compare only ``keys`` (a range each, at full depth): a later attempt's look at keys
    that differed, as changes in flight arrive."""
    found = Found()
    leaves = sorted({(HASH_BITS, key_hash(k)) for k in keys})
    for at in range(0, len(leaves), PASS_ROWS):
        _pass(source, sink, [], leaves[at : at + PASS_ROWS], found, counted=False)
    return found


Digest = tuple["array[int]", "array[int]"]  # counts and sums by range


def _at(digest: Digest, p: int) -> tuple[int, int]:
    return digest[0][p], digest[1][p]


def _top_digests(read: EntryReader, found: Found, side: int) -> Digest:
    """The first pass over one side: count and sum per top range, and in total."""
    size = 1 << TOP_BITS
    # Unboxed 64-bit cells: a list would hold an int object per sum, several MB a side.
    counts, sums = array("Q", bytes(8 * size)), array("Q", bytes(8 * size))
    shift = HASH_BITS - TOP_BITS
    total = 0
    for candidates in read(None):
        key, row = candidates[0]
        p = key_hash(key) >> shift
        h = row_hash(key, row)
        counts[p] += 1
        sums[p] = (sums[p] + h) & _MASK
        total += h
    found.counts[side] += sum(counts)
    found.sums[side] += total
    return counts, sums


def _sort_ranges(
    differing: Iterable[Range],
    sizes: dict[Range, int],
    splits: list[Range],
    leaves: list[tuple[Range, int]],
) -> None:
    """A differing range is a leaf when small enough (or at full depth), else cut again."""
    for r in differing:
        if sizes[r] <= LEAF_ROWS or r[0] + STEP_BITS > HASH_BITS:
            leaves.append((r, sizes[r]))
        else:
            splits.append(r)


def _take_leaves(
    leaves: list[tuple[Range, int]],
) -> tuple[list[tuple[Range, int]], list[tuple[Range, int]]]:
    """The leaves one pass holds: about :data:`PASS_ROWS` rows (at least one leaf)."""
    rows = 0
    for n, (_, size) in enumerate(leaves):
        rows += size
        if rows > PASS_ROWS and n:
            return leaves[:n], leaves[n:]
    return leaves, []


Digests = dict[Range, tuple[int, int]]


def _pass(
    source: EntryReader,
    sink: EntryReader,
    splits: Sequence[Range],
    leaves: Sequence[Range],
    found: Found,
    counted: bool = True,
) -> tuple[Digests, Digests]:
    """Stream both sides once: the sub-range digests of ``splits``, and the rows of ``leaves``
    compared key by key into ``found``."""
    split_at = _by_depth(splits)
    leaf_at = _by_depth(leaves)
    sub: list[Digests] = [{}, {}]
    held: list[list[Candidates]] = [[], []]
    both = {**leaf_at}
    for bits, prefixes in split_at.items():
        both[bits] = both.get(bits, set()) | prefixes

    def wanted(key: bytes) -> bool:
        return _within([key_hash(key)], both)

    for side, read in enumerate((source, sink)):
        for candidates in read(wanted):
            hashes = [key_hash(key) for key, _ in candidates]
            if _within(hashes, leaf_at):
                held[side].append(candidates)
            if split_at:
                _add_sub(sub[side], split_at, hashes[0], candidates[0])
    _compare_leaves(held, leaf_at, found, counted)
    found.passes += 1
    return sub[0], sub[1]


def _by_depth(ranges: Iterable[Range]) -> dict[int, set[int]]:
    at: dict[int, set[int]] = {}
    for bits, prefix in ranges:
        at.setdefault(bits, set()).add(prefix)
    return at


def _within(hashes: Sequence[int], at: dict[int, set[int]]) -> bool:
    return any(h >> (HASH_BITS - bits) in prefixes for bits, prefixes in at.items() for h in hashes)


def _add_sub(sub: Digests, split_at: dict[int, set[int]], h: int, entry: Entry) -> None:
    for bits, prefixes in split_at.items():
        if h >> (HASH_BITS - bits) in prefixes:
            r = (bits + STEP_BITS, h >> (HASH_BITS - bits - STEP_BITS))
            count, total = sub.get(r, (0, 0))
            sub[r] = (count + 1, (total + row_hash(*entry)) & _MASK)
            return


def _compare_leaves(
    held: list[list[Candidates]], leaf_at: dict[int, set[int]], found: Found, counted: bool
) -> None:
    """Compare the held rows key by key. A sink row stands for the candidate equal to the
    source's row of its key, else for its own. The counts and sums of the first pass counted
    each row read; here each key counts once (``counted``: correct them)."""
    source: dict[bytes, bytes] = {}
    for candidates in held[0]:
        source[candidates[0][0]] = candidates[0][1]
    sink: dict[bytes, bytes] = {}
    for candidates in held[1]:
        chosen = next((c for c in candidates if source.get(c[0]) == c[1]), candidates[0])
        if chosen is candidates[0] and not _within([key_hash(chosen[0])], leaf_at):
            continue  # its own key belongs to another leaf, compared there
        sink[chosen[0]] = chosen[1]
    if counted:
        for side, rows, state in ((0, held[0], source), (1, held[1], sink)):
            _correct(found, side, rows, state, leaf_at)
    found.missing.update(source.keys() - sink.keys())
    found.extra.update(sink.keys() - source.keys())
    different = [k for k in source.keys() & sink.keys() if source[k] != sink[k]]
    found.different.update(different)
    for key in heapq.nsmallest(DETAILED, different):
        found.rows[key] = (source[key], sink[key])
    if len(found.rows) > DETAILED:
        found.rows = {k: found.rows[k] for k in heapq.nsmallest(DETAILED, found.rows)}


def _correct(
    found: Found,
    side: int,
    rows: list[Candidates],
    state: dict[bytes, bytes],
    leaf_at: dict[int, set[int]],
) -> None:
    """Replace what the first pass counted for these leaves' rows by their distinct keys."""
    for candidates in rows:
        key, row = candidates[0]
        if _within([key_hash(key)], leaf_at):
            found.counts[side] -= 1
            found.sums[side] -= row_hash(key, row)
    found.counts[side] += len(state)
    found.sums[side] += sum(row_hash(k, r) for k, r in state.items())
