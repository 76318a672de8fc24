"""Compare two streams of canonical rows in memory that does not grow with the table.

Each row's canonical key JSON is hashed to 64 bits (BLAKE2b); the hash space is cut into
ranges. A pass streams both sides once, in any order (a Redis SCAN has none), and sums per
range an order-independent digest: the count of rows and the sum, mod 2**64, of a 64-bit hash
of ``key + NUL + row``. Ranges whose digests differ are cut again (:data:`STEP_BITS` more bits of
the hash) in the next pass, until a differing range holds at most :data:`LEAF_ROWS` rows on
each side: then its rows are compared key by key. When a pass's leaves hold few rows
(:data:`WHOLE_ROWS`), they are held whole; when more, by their hashes alone (16 bytes a row, in
unboxed arrays), which finds the differing keys' hashes, and a last pass (:func:`recheck`) reads
only those keys whole: their canonical JSON is what a report and a repair need.

Memory is the ranges' digests plus, for one pass, the differing leaves' rows whole (at most
:data:`WHOLE_ROWS`, 12 MB) or their hashes (about 70 bytes a row while a side is sorted, at most
:data:`PASS_ROWS` rows: 17 MB), whatever the table's size; then the differing keys themselves
(:data:`RESOLVE_KEYS` at a time). Holding every leaf's rows whole took about 590 bytes a row:
90 MB more at 10M rows than at 1M for 200 differing keys. A table of which every row differs
costs more passes, never more memory beyond those keys.

A key read twice on one side (a keyless table's identical rows, a SCAN's repeats) makes its
range differ; its leaf counts the key once, as the former in-memory comparison did, and the
counts and checksums are corrected by what the leaves found. Two keys of one table with the
same 64-bit hash (about one chance in 10**5 at 10M rows) would be compared as one.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from cdc.envelope.encode import exact

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
#: Rows of differing leaves compared in one pass, by hashes: 16 bytes a row held, about 50
#: more while a side is sorted (12 MB at most, against about 400 bytes a row held whole).
PASS_ROWS = 250_000
#: Up to this many rows of differing leaves in a pass, they are held whole (about 590 bytes a
#: row, 12 MB) and compared at once: no pass to read the differing keys again.
WHOLE_ROWS = 20_000
#: Differing keys read whole in one pass of :func:`recheck` (their rows are held).
RESOLVE_KEYS = 100_000
SPLITS_PER_PASS = 512  # ranges cut in one pass: at most 512 * 256 digests held
DETAILED = 5
_MASK = (1 << HASH_BITS) - 1
KINDS = ("missing", "extra", "different")


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
    """What a comparison found: the differing keys by kind, as hashes (``hashes``) and, once
    read whole, as canonical key JSON (``missing``, ``extra``, ``different``); the rows of the
    first few different keys (in key order); each side's count and checksum of distinct keys."""

    missing: set[bytes] = field(default_factory=set)
    extra: set[bytes] = field(default_factory=set)
    different: set[bytes] = field(default_factory=set)
    hashes: dict[str, set[int]] = field(default_factory=lambda: {k: set() for k in KINDS})
    rows: dict[bytes, tuple[bytes, bytes]] = field(default_factory=dict)
    counts: list[int] = field(default_factory=lambda: [0, 0])
    sums: list[int] = field(default_factory=lambda: [0, 0])
    passes: int = 0

    def __bool__(self) -> bool:
        return any(self.hashes.values())

    def checksum(self, side: int) -> str:
        return f"{self.sums[side] & _MASK:016x}"

    def key_hashes(self) -> set[int]:
        """Every differing key's hash, whatever its kind."""
        return set().union(*self.hashes.values())

    def read_keys(self) -> set[bytes]:
        """Every differing key read whole (canonical key JSON), whatever its kind."""
        return self.missing | self.extra | self.different


def compare_streams(source: EntryReader, sink: EntryReader, resolve: bool = True) -> Found:
    """Every key that is missing in, extra in, or different in ``sink``, found by range
    digests and bisection; counts and checksums of both sides.

    ``resolve``: read the differing keys whole (:func:`recheck`, one more pass when any
    differ), so ``missing``, ``extra``, ``different`` and ``rows`` are filled. Without it only
    their hashes are: a caller that looks again anyway (:func:`persistent`) saves the pass.
    """
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
        whole = sum(size for _, size in now_leaves) <= WHOLE_ROWS
        sub = _pass(source, sink, now_split, [r for r, _ in now_leaves], found, whole)
        differing = [r for r, d in sub[0].items() if d != sub[1].get(r)]
        differing += [r for r in sub[1] if r not in sub[0]]
        sizes = {r: max(sub[0].get(r, (0, 0))[0], sub[1].get(r, (0, 0))[0]) for r in differing}
        _sort_ranges(differing, sizes, splits, leaves)
    pending = found.key_hashes() - {key_hash(k) for k in found.read_keys()}
    if resolve and pending:
        _add_resolved(found, recheck(source, sink, pending), pending)
    return found


def recheck(source: EntryReader, sink: EntryReader, hashes: Iterable[int]) -> Found:
    """Compare only the keys of these hashes, read whole (a range each, at full depth): the
    differing keys' canonical JSON, or a later attempt's look at keys that differed, as changes
    in flight arrive."""
    found = Found()
    leaves = sorted({(HASH_BITS, h) for h in hashes})
    for at in range(0, len(leaves), RESOLVE_KEYS):
        _rows_pass(source, sink, leaves[at : at + RESOLVE_KEYS], found)
    return found


def persistent(before: Found, now: Found) -> Found:
    """What differed in both looks (``now`` read the keys whole), each key under the kind it
    had in ``now``: a key missing at first and wrong once it arrived differed both times. The
    counts and checksums of ``before``, which read every row."""
    differed = before.key_hashes()
    kept = {kind: {k for k in getattr(now, kind) if key_hash(k) in differed} for kind in KINDS}
    before.missing, before.extra, before.different = (kept[kind] for kind in KINDS)
    before.hashes = {kind: {key_hash(k) for k in kept[kind]} for kind in KINDS}
    before.rows = {k: v for k, v in now.rows.items() if k in before.different}
    before.passes += now.passes
    return before


def _add_resolved(found: Found, now: Found, pending: set[int]) -> None:
    """The keys of ``pending`` hashes as ``now`` read them whole, where they still differ (under
    the kind they have now); those that no longer do leave ``found``."""
    for kind in KINDS:
        added = {k for k in getattr(now, kind) if key_hash(k) in pending}
        getattr(found, kind).update(added)
        kept = found.hashes[kind] - pending
        found.hashes[kind] = kept | {key_hash(k) for k in added}
    found.rows.update((k, v) for k, v in now.rows.items() if k in found.different)
    if len(found.rows) > DETAILED:
        found.rows = {k: found.rows[k] for k in heapq.nsmallest(DETAILED, found.rows)}
    found.passes += now.passes


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
    # key_hash and row_hash inlined: this loop runs once a row of each side.
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes
    for candidates in read(None):
        key, row = candidates[0]
        p = from_bytes(blake2b(key, digest_size=8).digest(), "big") >> shift
        h = from_bytes(blake2b(key + b"\0" + row, digest_size=8).digest(), "big")
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
    """The leaves one pass compares: about :data:`PASS_ROWS` rows (at least one leaf)."""
    rows = 0
    for n, (_, size) in enumerate(leaves):
        rows += size
        if rows > PASS_ROWS and n:
            return leaves[:n], leaves[n:]
    return leaves, []


Digests = dict[Range, tuple[int, int]]


class _Hashed:
    """One side's rows of the leaves a pass compares, as (key hash, row hash) pairs in unboxed
    arrays; after :meth:`settle`, sorted by key hash with each key once (its last row read)."""

    def __init__(self) -> None:
        self.keys, self.rows = array("Q"), array("Q")

    def add(self, key: int, row: int) -> None:
        self.keys.append(key)
        self.rows.append(row)

    def settle(self) -> None:
        # One int a row while sorting (its key hash, then its place: equal keys stay in the
        # order read), about 50 bytes a row for the moment of the sort.
        width = len(self.keys).bit_length()
        order = sorted((k << width) | i for i, k in enumerate(self.keys))
        keys, rows = array("Q"), array("Q")
        place = (1 << width) - 1
        for packed in order:
            i = packed & place
            if keys and keys[-1] == self.keys[i]:
                rows[-1] = self.rows[i]  # read again: the later row stands, as a dict keeps
            else:
                keys.append(self.keys[i])
                rows.append(self.rows[i])
        self.keys, self.rows = keys, rows

    def get(self, key: int) -> int | None:
        at = bisect.bisect_left(self.keys, key)
        return self.rows[at] if at < len(self.keys) and self.keys[at] == key else None

    def total(self) -> int:
        return sum(self.rows)


def _pass(
    source: EntryReader,
    sink: EntryReader,
    splits: Sequence[Range],
    leaves: Sequence[Range],
    found: Found,
    whole: bool = False,
) -> tuple[Digests, Digests]:
    """Stream both sides once: the sub-range digests of ``splits``, and the rows of ``leaves``
    compared key by key into ``found``: held ``whole``, or by hashes into ``found.hashes``
    alone (the source first: a sink row stands for the candidate equal to the source's row of
    its key, else for its own)."""
    split_at = _by_depth(splits)
    leaf_at = _by_depth(leaves)
    sub: list[Digests] = [{}, {}]
    hashed = (_Hashed(), _Hashed())
    held: list[list[Candidates]] = [[], []]
    both = {**leaf_at}
    for bits, prefixes in split_at.items():
        both[bits] = both.get(bits, set()) | prefixes

    wanted = _key_filter(both)

    for side, read in enumerate((source, sink)):
        for candidates in read(wanted):
            hashes = [key_hash(key) for key, _ in candidates]
            if _within(hashes, leaf_at) and whole:
                held[side].append(_exact(candidates))
            elif _within(hashes, leaf_at):
                _hold(hashed, side, candidates, hashes, leaf_at, found)
            if split_at:
                _add_sub(sub[side], split_at, hashes[0], candidates[0])
        hashed[side].settle()
    if whole:
        _compare_rows(held, leaf_at, found, counted=True)
    else:
        _compare_hashed(hashed, found)
    found.passes += 1
    return sub[0], sub[1]


def _hold(
    hashed: tuple[_Hashed, _Hashed],
    side: int,
    candidates: Candidates,
    hashes: Sequence[int],
    leaf_at: dict[int, set[int]],
    found: Found,
) -> None:
    """Hold one row of a leaf, by hashes. The first pass counted each row read under its own
    entry; here each key counts once (:func:`_compare_hashed` adds the distinct keys back)."""
    own = _within(hashes[:1], leaf_at)
    if own:
        found.counts[side] -= 1
        found.sums[side] -= row_hash(*candidates[0])
    if side == 0:
        hashed[0].add(hashes[0], row_hash(*candidates[0]))
        return
    for h, entry in zip(hashes, candidates, strict=True):
        term = row_hash(*entry)
        if hashed[0].get(h) == term:
            hashed[1].add(h, term)
            return
    if own:  # else its own key belongs to another leaf, compared there
        hashed[1].add(hashes[0], row_hash(*candidates[0]))


def _compare_hashed(hashed: tuple[_Hashed, _Hashed], found: Found) -> None:
    """Merge the two sorted sides: keys only the source has, only the sink has, or both with
    different rows; each side's distinct keys counted back."""
    source, sink = hashed
    for side, held in enumerate(hashed):
        found.counts[side] += len(held.keys)
        found.sums[side] += held.total()
    i = j = 0
    missing, extra, different = (found.hashes[kind] for kind in KINDS)
    while i < len(source.keys) or j < len(sink.keys):
        a = source.keys[i] if i < len(source.keys) else None
        b = sink.keys[j] if j < len(sink.keys) else None
        if b is None or (a is not None and a < b):
            missing.add(a)  # type: ignore[arg-type]
            i += 1
        elif a is None or b < a:
            extra.add(b)
            j += 1
        else:
            if source.rows[i] != sink.rows[j]:
                different.add(a)
            i += 1
            j += 1


def _exact(candidates: Candidates) -> Candidates:
    """Entries in bytes objects of their own size, to be held (orjson's are 4 KiB and more)."""
    return [(exact(key), exact(row)) for key, row in candidates]


def _by_depth(ranges: Iterable[Range]) -> dict[int, set[int]]:
    at: dict[int, set[int]] = {}
    for bits, prefix in ranges:
        at.setdefault(bits, set()).add(prefix)
    return at


def _key_filter(at: dict[int, set[int]]) -> KeyFilter:
    """Whether a key's hash falls in ``at``'s ranges: as :func:`_within`, for every row a
    pass after the first reads (so its hash inlined, its depths listed once)."""
    depths = [(HASH_BITS - bits, prefixes) for bits, prefixes in at.items()]
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes

    def wanted(key: bytes) -> bool:
        h = from_bytes(blake2b(key, digest_size=8).digest(), "big")
        for shift, prefixes in depths:  # noqa: SIM110 (a loop: no generator a row)
            if h >> shift in prefixes:
                return True
        return False

    return wanted


def _within(hashes: Sequence[int], at: dict[int, set[int]]) -> bool:
    return any(h >> (HASH_BITS - bits) in prefixes for bits, prefixes in at.items() for h in hashes)


def _add_sub(sub: Digests, split_at: dict[int, set[int]], h: int, entry: Entry) -> None:
    for bits, prefixes in split_at.items():
        if h >> (HASH_BITS - bits) in prefixes:
            r = (bits + STEP_BITS, h >> (HASH_BITS - bits - STEP_BITS))
            count, total = sub.get(r, (0, 0))
            sub[r] = (count + 1, (total + row_hash(*entry)) & _MASK)
            return


def _rows_pass(
    source: EntryReader, sink: EntryReader, leaves: Sequence[Range], found: Found
) -> None:
    """Stream both sides once and compare the rows of ``leaves`` (one key each), held whole."""
    leaf_at = _by_depth(leaves)

    wanted = _key_filter(leaf_at)

    held: list[list[Candidates]] = [[], []]
    for side, read in enumerate((source, sink)):
        for candidates in read(wanted):
            if _within([key_hash(key) for key, _ in candidates], leaf_at):
                held[side].append(_exact(candidates))
    _compare_rows(held, leaf_at, found, counted=False)
    found.passes += 1


def _compare_rows(
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
    missing, extra = source.keys() - sink.keys(), sink.keys() - source.keys()
    different = [k for k in source.keys() & sink.keys() if source[k] != sink[k]]
    for kind, keys in (("missing", missing), ("extra", extra), ("different", different)):
        getattr(found, kind).update(keys)
        found.hashes[kind].update(key_hash(k) for k in keys)
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
