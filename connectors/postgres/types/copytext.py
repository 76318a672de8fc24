"""Split the rows of ``COPY ... TO STDOUT`` (text format) into text values, without I/O.

The text format is one row per line, columns separated by tabs, ``\\N`` for NULL, and backslash
escapes for tabs, newlines, backslashes and other control bytes. Values come out exactly as
pgoutput sends them (the same output functions under the same session settings), so the stream's
converters apply unchanged and snapshot and stream values are identical.
"""

from __future__ import annotations

import re
from typing import Final

_SIMPLE_ESCAPES: Final = {
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
}
_ESCAPE: Final = re.compile(r"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|(.))", re.DOTALL)
NULL: Final = "\\N"


def _replace(match: re.Match[str]) -> str:
    octal, hexa, other = match.groups()
    if octal is not None:
        return chr(int(octal, 8))
    if hexa is not None:
        return chr(int(hexa, 16))
    return _SIMPLE_ESCAPES.get(other, other)


def unescape(field: str) -> str | None:
    """One field's value: ``None`` for ``\\N``, else the text with escapes resolved.

    Octal and hex escapes name bytes; in a UTF-8 stream PostgreSQL only writes them for control
    characters (below 0x80), so mapping them to code points is exact.
    """
    if field == NULL:
        return None
    return _ESCAPE.sub(_replace, field)


def split_row(line: str) -> tuple[str | None, ...]:
    """The values of one row (``line`` without its trailing newline).

    The fast path, a row without any backslash, is a single ``str.split``: no NULL and no escape
    can be present then.
    """
    if "\\" not in line:
        return tuple(line.split("\t"))
    return tuple(unescape(f) if "\\" in f else f for f in line.split("\t"))


def split_line(line: bytes) -> tuple[str | None, ...]:
    """The values of one line of the stream as it arrives (UTF-8, its newline optional)."""
    text = str(line, "utf-8")
    return split_row(text[:-1] if text.endswith("\n") else text)


def split_block(block: str) -> list[tuple[str | None, ...]]:
    """The rows of a block of whole lines (each ending in a newline)."""
    lines = block.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [split_row(line) for line in lines]
