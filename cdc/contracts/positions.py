"""Typed source positions, the offsets that carry them, and the check that a stored or
acknowledged position never moves back.

:data:`Offsets` is what the plugin contract passes (``Source.open``/``ack``,
``SourceBatch.commit_offsets``, a log transaction's ``store_offsets``): a mapping of the source's
own plain JSON, exactly what the log stores. A third-party source may hand on a plain ``dict``.
A source with a typed position hands on :class:`PositionedOffsets`, a ``dict`` of the same items
(so the stored bytes are the same) that also carries the position it encodes, so nothing
re-parses it on the way to the log and back to ``ack``.

Each source has one position type (``connectors.postgres.lsn.Lsn``, the MongoDB resume points in
``connectors.mongodb.positions``) that implements :class:`Position`: it decodes itself from
offsets (``from_offsets``) and orders itself (``<``). :func:`position_in` reaches it from any
offsets: the carried one, or decoded from the items (what the log read back, a plain mapping).

The check, and why the log stays source-neutral: the log never knows a position type. When the
offsets it is asked to store carry a position, it decodes the offsets stored last *with the new
position's own type* (``type(new).from_offsets(stored)``) and refuses, with
:class:`PositionMovedBackwards`, a new position that sorts before it. Offsets that carry no
position (a test's ``{"pos": 2}``, a third-party source) are stored as before, unchecked. The
embedded log reads the stored offsets inside its write transaction (exact, across restarts);
the Kafka log cannot read its offsets topic per commit cheaply, so it checks against the last
position it committed in this process (:class:`CommittedPositions`). A source's ``ack`` checks
the same way against the previous ``ack`` of its session (:func:`require_forward`).

A refusal is fatal: the store fails before anything of it is written, the transaction can only
be aborted, so nothing of it is committed, and the pipeline stops with both positions named.
Equal positions are accepted (a reopened session re-stores where it resumed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, Self, TypeAlias, TypeVar

from cdc.contracts.errors import CdcError, Fatal

Offsets: TypeAlias = Mapping[str, Any]
"""A source's offsets: top-level keys the source owns, JSON values (stored, ``None`` deletes the
key); a plain mapping, or :class:`PositionedOffsets` carrying the typed position too."""


class Position(Protocol):
    """A source's position: decoded from the stored offsets, ordered, printable (``str``)."""

    @classmethod
    def from_offsets(cls, offsets: Offsets) -> Self | None:
        """The position stored in ``offsets``, or ``None`` when they hold none."""
        ...

    def __lt__(self, other: Any, /) -> bool:
        """``self`` comes before ``other`` (for a partial order: in some part of it)."""
        ...


P = TypeVar("P", bound=Position)


class PositionedOffsets(dict[str, Any]):
    """Offsets to store (the plain JSON the source stores) and the typed position they encode.

    Equal to the plain ``dict`` of the same items, and stored as one: the log writes the items.
    """

    __slots__ = ("position",)

    def __init__(self, items: Offsets, position: Position) -> None:
        super().__init__(items)
        self.position = position

    def with_items(self, items: Offsets) -> PositionedOffsets:
        """These offsets with ``items`` added (a snapshot's progress beside the position)."""
        return PositionedOffsets({**self, **items}, self.position)


class PositionMovedBackwards(CdcError, Fatal):
    """A source handed on a position before one already stored or acknowledged."""

    def __init__(self, old: Position, new: Position, what: str) -> None:
        super().__init__(
            f"source position moved backwards: {new} is before the {what} position {old}; "
            "nothing of this transaction is committed (a source bug: report it with this "
            "message and the pipeline's log)"
        )
        self.old, self.new = old, new


def carried(offsets: Offsets) -> Position | None:
    """The typed position ``offsets`` carry, if they are :class:`PositionedOffsets`."""
    return offsets.position if isinstance(offsets, PositionedOffsets) else None


def position_in(offsets: Offsets, kind: type[P]) -> P | None:
    """The position of type ``kind`` in ``offsets``: the one they carry, else decoded from their
    items (plain offsets: as the log read them back, or built by hand); ``None`` when they hold
    none."""
    position = offsets.position if isinstance(offsets, PositionedOffsets) else None
    return position if isinstance(position, kind) else kind.from_offsets(offsets)


def rebuilt(offsets: Offsets, items: Offsets) -> dict[str, Any]:
    """``items`` as offsets carrying the position ``offsets`` carry, if any (for a source that
    adds to or trims the offsets it hands on)."""
    position = carried(offsets)
    return dict(items) if position is None else PositionedOffsets(items, position)


def require_forward(old: Position | None, new: Position, what: str = "stored") -> None:
    """Refuse ``new`` when it comes before ``old``.

    Raises:
        PositionMovedBackwards: ``new < old``.
    """
    if old is not None and new < old:
        raise PositionMovedBackwards(old, new, what)


def check_forward(new: Position, stored: Offsets) -> None:
    """Refuse ``new`` when it comes before the position of its type in ``stored``.

    Raises:
        PositionMovedBackwards: it does.
    """
    require_forward(type(new).from_offsets(stored), new)


class CommittedPositions:
    """The last position of each type stored by a committed transaction of one log.

    For a log whose stored offsets cost a round trip to read (Kafka): the position a
    transaction stores counts once that transaction is seen committed, at the next check.
    """

    def __init__(self) -> None:
        self._last: dict[type, Position] = {}
        self._pending: tuple[Callable[[], bool], Position] | None = None

    def check(self, new: Position, committed: Callable[[], bool]) -> None:
        """Refuse ``new`` when it comes before the last committed position of its type;
        ``committed`` tells later whether the transaction storing ``new`` committed.

        Raises:
            PositionMovedBackwards: it does.
        """
        if self._pending is not None:
            was_committed, position = self._pending
            if was_committed():
                self._last[type(position)] = position
            self._pending = None
        require_forward(self._last.get(type(new)), new)
        self._pending = (committed, new)
