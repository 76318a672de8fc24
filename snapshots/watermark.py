"""The DBLog watermark window (Netflix, 2019), as pure bookkeeping over keys.

How a chunk is read while the stream keeps flowing:

1. write a *low* watermark into the change stream (a transactional logical message);
2. read the chunk with a plain query: it sees every transaction committed before the low
   watermark, and possibly some committed after it;
3. write a *high* watermark.

The stream delivers the low and the high watermark in commit order. Any change the stream shows
between them may or may not be in the chunk's read, so the chunk's row for that key is dropped:
the streamed change is at least as new. Every other chunk row is exactly the table's state at the
high watermark, and is emitted at that point of the stream. Changes before the low watermark are
older than the read, changes after the high one are newer than it: ordering per key holds.

This module has no I/O: the source feeds it stream events and watermark messages in stream order
and the reader's rows when they are ready (always before the high watermark is written).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Row = TypeVar("Row")

LOW = "low"
HIGH = "high"


@dataclass
class Window(Generic[Row]):
    """One chunk's window.

    Attributes:
        table: ``schema.table`` the chunk belongs to.
        opened: the low watermark went by in the stream.
        rows: the chunk's rows by encoded key, once read.
        changed: keys the stream changed while the window was open.
        truncated: the stream truncated the table while the window was open.
    """

    table: str
    opened: bool = False
    rows: Mapping[bytes, Row] | None = None
    changed: set[bytes] = field(default_factory=set)
    truncated: bool = False


class Watermarks(Generic[Row]):
    """Every chunk window in flight, by watermark id."""

    def __init__(self) -> None:
        self._windows: dict[str, Window[Row]] = {}

    def __len__(self) -> int:
        return len(self._windows)

    def expect(self, wid: str, table: str) -> None:
        """Announce a window before its low watermark is written."""
        self._windows[wid] = Window(table)

    def deliver(self, wid: str, rows: Mapping[bytes, Row]) -> None:
        """The chunk's rows (call before writing the high watermark)."""
        window = self._windows.get(wid)
        if window is not None:
            window.rows = rows

    def abandon(self, wid: str) -> None:
        """Forget a window whose read failed; its watermarks, if any arrive, are ignored."""
        self._windows.pop(wid, None)

    def low(self, wid: str) -> bool:
        """The low watermark ``wid`` arrived in the stream; False if it is unknown (stale)."""
        window = self._windows.get(wid)
        if window is None:
            return False
        window.opened = True
        return True

    def observe(self, table: str, key: bytes) -> None:
        """A streamed change of ``key`` in ``table``."""
        for window in self._windows.values():
            if window.opened and window.table == table:
                window.changed.add(key)

    def observe_truncate(self, table: str) -> None:
        """A streamed TRUNCATE of ``table``: no row of an open window may be emitted."""
        for window in self._windows.values():
            if window.opened and window.table == table:
                window.truncated = True

    def high(self, wid: str) -> tuple[str, list[Row]] | None:
        """The high watermark ``wid`` arrived: the window closes.

        Returns:
            ``(table, rows to emit)``, or ``None`` for an unknown or never-opened window (a
            stale watermark from an earlier session, or one whose low watermark was not seen).

        Raises:
            RuntimeError: the window's rows were never delivered, which the reader guarantees
                against by delivering before it writes the high watermark.
        """
        window = self._windows.pop(wid, None)
        if window is None or not window.opened:
            return None
        if window.rows is None:
            raise RuntimeError(f"watermark window {wid} closed before its rows were read")
        if window.truncated:
            return window.table, []
        changed = window.changed
        return window.table, [row for key, row in window.rows.items() if key not in changed]


def parse(content: bytes) -> tuple[str, str] | None:
    """``(kind, id)`` of a watermark message's content (``b"low:<id>"``), else ``None``."""
    text = content.decode("utf-8", "replace")
    kind, _, wid = text.partition(":")
    if kind not in (LOW, HIGH) or not wid:
        return None
    return kind, wid


def render(kind: str, wid: str) -> str:
    """The content of a watermark message."""
    return f"{kind}:{wid}"
