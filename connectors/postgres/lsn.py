"""``Lsn``: a PostgreSQL WAL position, and its one codec to and from the stored offsets.

An ``int`` subclass, so the stream compares and keeps LSNs at the cost of ints (the hot path
handles plain ints from the socket and makes an ``Lsn`` only at a transaction's end). Its text
is ``pg_lsn``'s as PostgreSQL 14-17 print it: ``16/B374D848``, upper-case hex, no padding (18
pads the low half to 8 digits); parsing takes any case and padding, as the server does. Stored as
``{"postgres": {"lsn": <int>, "lsn_str": "X/Y"}}``; ``lsn_str`` is for people reading the log.

Annotations say ``Lsn`` wherever an LSN crosses a module boundary (a public function, a
dataclass field, a protocol method); only the per-message loop and what it calls keep the plain
``int`` the socket gives, which costs no call to wrap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from cdc.contracts.positions import Offsets, PositionedOffsets

OFFSET_KEY: Final = "postgres"
MAX_LSN: Final = (1 << 64) - 1
# Plain hex digits only: int(x, 16) alone would also take signs, '0x' and underscores.
_TEXT = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


class Lsn(int):
    """A 64-bit WAL position: ordered as an int, printed as ``pg_lsn``.

    Raises:
        ValueError: the value is not a 64-bit unsigned integer.
    """

    __slots__ = ()

    def __new__(cls, value: int = 0) -> Lsn:
        if not 0 <= value <= MAX_LSN:
            raise ValueError(f"LSN out of range: {value}")
        return super().__new__(cls, value)

    @classmethod
    def parse(cls, text: str) -> Lsn:
        """``'16/B374D848'`` (any case, any zero padding, surrounding spaces) as an ``Lsn``.

        Raises:
            ValueError: not an LSN.
        """
        match = _TEXT.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"invalid LSN: {text!r}")
        return cls((int(match.group(1), 16) << 32) | int(match.group(2), 16))

    @classmethod
    def from_offsets(cls, offsets: Offsets) -> Lsn | None:
        """The commit LSN stored in ``offsets``, or ``None`` when they hold none."""
        entry = offsets.get(OFFSET_KEY)
        if isinstance(entry, Mapping):
            value = entry.get("lsn")
            if isinstance(value, int) and not isinstance(value, bool):
                return value if type(value) is Lsn else cls(value)
        return None

    def to_offsets(self, commit: Lsn | None = None) -> PositionedOffsets:
        """The offsets that store this position (and carry it, for the log's check), and
        ``commit``, the end of the last commit streamed (``lsn_commit``, as Debezium's offsets
        name it: ``source.sequence``'s first LSN after a restart), when known."""
        entry: dict[str, Any] = {"lsn": int(self), "lsn_str": str(self)}
        if commit is not None:
            entry["lsn_commit"] = int(commit)
        return PositionedOffsets({OFFSET_KEY: entry}, self)

    @classmethod
    def commit_from_offsets(cls, offsets: Offsets) -> Lsn | None:
        """``lsn_commit`` of ``offsets`` (see :meth:`to_offsets`); ``None`` when they hold none
        (offsets stored before it was, or at a snapshot point or a heartbeat)."""
        entry = offsets.get(OFFSET_KEY)
        value = entry.get("lsn_commit") if isinstance(entry, Mapping) else None
        return cls(value) if isinstance(value, int) and not isinstance(value, bool) else None

    def __str__(self) -> str:
        return f"{self >> 32:X}/{self & 0xFFFFFFFF:X}"

    def __repr__(self) -> str:
        return f"Lsn('{self}')"

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else int(self).__format__(spec)


def str_to_lsn(text: str) -> Lsn:
    """``Lsn.parse``, as a function (see :meth:`Lsn.parse`)."""
    return Lsn.parse(text)


def lsn_to_str(lsn: int) -> str:
    """An LSN's ``pg_lsn`` text, e.g. ``'16/B374D848'``, ``'0/1E043F8'``.

    Raises:
        ValueError: the value is not a 64-bit unsigned integer.
    """
    return str(Lsn(lsn))
