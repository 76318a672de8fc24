"""``hstore`` (the extension's type, known by name) as Debezium writes it, per
``hstore.handling.mode``: ``json``, a JSON text of the object; ``map``, the object itself.

Its text form: ``"a"=>"1", "b"=>NULL``, keys and values quoted, ``"`` and ``\\`` escaped.
"""

from __future__ import annotations

import re
from typing import Final

import orjson

from connectors.postgres.types.scalars import Converter

__all__ = ["hstore_converter", "parse_hstore"]

_PAIR: Final = re.compile(r'\s*"((?:[^"\\]|\\.)*)"\s*=>\s*(?:"((?:[^"\\]|\\.)*)"|(NULL))\s*(,|$)')
_ESCAPE: Final = re.compile(r"\\(.)", re.DOTALL)


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


def _hstore_json(text: str) -> str:
    return orjson.dumps(parse_hstore(text)).decode("utf-8")


def hstore_converter(mode: str) -> Converter:
    """``hstore``: a JSON text (``json``) or the object (``map``)."""
    return _hstore_json if mode == "json" else parse_hstore
