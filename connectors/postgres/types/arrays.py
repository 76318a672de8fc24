"""Array values in their text form: ``'{1,2,NULL}'``, ``'{{1,2},{3,4}}'``, ``'[0:1]={1,2}'``,
``'{"a\\"b",c}'``."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from connectors.postgres.types.scalars import Converter, identity

__all__ = ["array_parser"]

_QUOTED: Final = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)
_ESCAPED: Final = re.compile(r"\\(.)", re.DOTALL)


def array_parser(element: Converter, delimiter: str) -> Converter:
    """A converter of an array's text whose elements ``element`` converts."""
    convert = None if element is identity else element
    unquoted = re.compile(r"[^" + re.escape(delimiter) + r"}]*").match

    def parse(text: str) -> list[Any]:
        if text.startswith("["):  # explicit lower bounds: '[0:1]={1,2}'; keep the elements
            text = text[text.index("=") + 1 :]
        if '"' not in text and "{" not in text[1:]:
            return _flat(text, convert, delimiter)
        values, end = _nested(text, 0, convert, delimiter, unquoted)
        if end != len(text):
            raise ValueError(f"trailing text after array at offset {end}")
        return values

    return parse


def _flat(text: str, convert: Converter | None, delimiter: str) -> list[Any]:
    """A one-dimensional array without quoted elements: a split does it."""
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("array text must be enclosed in braces")
    inner = text[1:-1]
    if not inner:
        return []
    if convert is None:
        return [None if item == "NULL" else item for item in inner.split(delimiter)]
    return [None if item == "NULL" else convert(item) for item in inner.split(delimiter)]


def _nested(
    text: str,
    pos: int,
    convert: Converter | None,
    delimiter: str,
    unquoted: Callable[[str, int], re.Match[str] | None],
) -> tuple[list[Any], int]:
    """The array starting at ``text[pos] == '{'`` and the position after its ``'}'``."""
    if text[pos] != "{":
        raise ValueError(f"expected '{{' at offset {pos}")
    pos += 1
    values: list[Any] = []
    value: Any
    if text[pos] == "}":
        return values, pos + 1
    while True:
        char = text[pos]
        if char == "{":
            value, pos = _nested(text, pos, convert, delimiter, unquoted)
        elif char == '"':
            quoted = _QUOTED.match(text, pos)
            if quoted is None:
                raise ValueError(f"unterminated quoted element at offset {pos}")
            item = _ESCAPED.sub(r"\1", quoted.group(1))
            value = item if convert is None else convert(item)
            pos = quoted.end()
        else:
            bare = unquoted(text, pos)
            item = bare.group() if bare is not None else ""
            pos += len(item)
            value = None if item == "NULL" else item if convert is None else convert(item)
        values.append(value)
        char = text[pos]
        if char == "}":
            return values, pos + 1
        if char != delimiter:
            raise ValueError(f"expected {delimiter!r} or '}}' at offset {pos}")
        pos += 1
