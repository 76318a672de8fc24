"""``hstore`` (the extension's type, known by name) as Debezium writes it, per
``hstore.handling.mode``: ``json``, a JSON text of the object; ``map``, the object itself.

Its text form: ``"a"=>"1", "b"=>NULL``, keys and values quoted, ``"`` and ``\\`` escaped.

Debezium reads the text into a ``java.util.HashMap`` (pgjdbc's ``HStoreConverter``), so its
keys come in that map's iteration order, not the server's; :func:`java_hash_map_order` gives
that order (``tests/debezium/OBSERVED.md``). The JSON text is Jackson's: compact, non-ASCII
kept, control characters as ``\\b \\t \\n \\f \\r`` or ``\\u00XX`` with upper-case hex.
"""

from __future__ import annotations

import re
from typing import Final

from connectors.postgres.types.scalars import Converter

__all__ = ["hstore_converter", "hstore_json", "hstore_map", "java_hash_map_order", "parse_hstore"]

_PAIR: Final = re.compile(r'\s*"((?:[^"\\]|\\.)*)"\s*=>\s*(?:"((?:[^"\\]|\\.)*)"|(NULL))\s*(,|$)')
_ESCAPE: Final = re.compile(r"\\(.)", re.DOTALL)
_SHORT: Final = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
#: Jackson's escapes: ``"``, ``\\``, and every control character.
_JACKSON: Final = str.maketrans(
    {
        '"': '\\"',
        "\\": "\\\\",
        **{chr(c): _SHORT.get(chr(c), f"\\u{c:04X}") for c in range(32)},
    }
)
#: java.util.HashMap: initial capacity, load factor, bin length that asks for a bigger table.
_INITIAL, _LOAD, _TREEIFY, _MIN_TREEIFY = 16, 0.75, 8, 64


def parse_hstore(text: str) -> dict[str, str | None]:
    """The pairs of ``hstore`` text, in the server's order.

    Raises:
        ValueError: not ``hstore`` text.
    """
    pairs: dict[str, str | None] = {}
    pos = 0
    while pos < len(text):
        match = _PAIR.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"not hstore text at offset {pos}")
        key, value, null, _ = match.groups()
        pairs[_ESCAPE.sub(r"\1", key)] = None if null else _ESCAPE.sub(r"\1", value or "")
        pos = match.end()
    return pairs


def _java_hash(key: str) -> int:
    """``HashMap.hash(key)``: ``String.hashCode`` (over UTF-16 units) spread by ``h ^ h>>>16``."""
    h = 0
    units = key.encode("utf-16-le")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] | units[i + 1] << 8)) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _final_capacity(hashes: list[int]) -> int:
    """The table size a ``new HashMap<>()`` ends with after putting these distinct keys."""
    capacity = _INITIAL
    bins: dict[int, int] = {}
    for size, h in enumerate(hashes, 1):
        slot = h & (capacity - 1)
        bins[slot] = bins.get(slot, 0) + 1
        grow = bins[slot] > _TREEIFY and capacity < _MIN_TREEIFY  # treeifyBin resizes
        if grow:
            capacity *= 2
        if size > capacity * _LOAD:
            capacity *= 2
            grow = True
        if grow:
            bins = {}
            for seen in hashes[:size]:
                bins[seen & (capacity - 1)] = bins.get(seen & (capacity - 1), 0) + 1
    return capacity


def java_hash_map_order(pairs: dict[str, str | None]) -> dict[str, str | None]:
    """The pairs in the iteration order of a ``java.util.HashMap`` they were put into in order:
    by bucket, then (a resize keeps each bucket's relative order) insertion order.

    A bin of more than 8 colliding keys in a table of 64 or more becomes a tree whose later
    insertions Java orders differently; only crafted keys get there, so it is not modelled.
    """
    keys = list(pairs)
    hashes = [_java_hash(k) for k in keys]
    mask = _final_capacity(hashes) - 1
    order = sorted(range(len(keys)), key=lambda i: hashes[i] & mask)
    return {keys[i]: pairs[keys[i]] for i in order}


def _jackson(text: str) -> str:
    return '"' + text.translate(_JACKSON) + '"'


def hstore_json(text: str) -> str:
    """``hstore`` under ``json``: the JSON text Debezium's Jackson generator writes."""
    fields = (
        f"{_jackson(k)}:{'null' if v is None else _jackson(v)}"
        for k, v in java_hash_map_order(parse_hstore(text)).items()
    )
    return "{" + ",".join(fields) + "}"


def hstore_map(text: str) -> dict[str, str | None]:
    """``hstore`` under ``map``: the object, in Debezium's (HashMap) key order."""
    return java_hash_map_order(parse_hstore(text))


def hstore_converter(mode: str) -> Converter:
    """``hstore``: a JSON text (``json``) or the object (``map``)."""
    return hstore_json if mode == "json" else hstore_map
