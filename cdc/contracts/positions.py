"""Typed source positions, and the check that a stored or acknowledged one never moves back.

Each source has one position type (``connectors.postgres.lsn.Lsn``, the MongoDB resume points in
``connectors.mongodb.positions``) that implements :class:`Position`: it decodes itself from the
stored offsets (``from_offsets``) and orders itself (``<``). The stored format stays the
source's own plain JSON; what travels from the source to the log and back to ``ack`` is an
:class:`Offsets`, a ``dict`` of exactly that JSON which also carries the typed position it
encodes, so nothing re-parses it on the way.

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
from typing import Any, Protocol, Self

from cdc.contracts.errors import CdcError, Fatal


class Position(Protocol):
    """A source's position: decoded from the stored offsets, ordered, printable (``str``)."""

    @classmethod
    def from_offsets(cls, offsets: Mapping[str, Any]) -> Self | None:
        """The position stored in ``offsets``, or ``None`` when they hold none."""
        ...

    def __lt__(self, other: Any, /) -> bool:
        """``self`` comes before ``other`` (for a partial order: in some part of it)."""
        ...


class Offsets(dict[str, Any]):
    """Offsets to store (the plain JSON the source stores) and the typed position they encode.

    Equal to the plain ``dict`` of the same items, and stored as one: the log writes the items.
    """

    __slots__ = ("position",)

    def __init__(self, items: Mapping[str, Any], position: Position) -> None:
        super().__init__(items)
        self.position = position

    def with_items(self, items: Mapping[str, Any]) -> Offsets:
        """These offsets with ``items`` added (a snapshot's progress beside the position)."""
        return Offsets({**self, **items}, self.position)


class PositionMovedBackwards(CdcError, Fatal):
    """A source handed on a position before one already stored or acknowledged."""

    def __init__(self, old: Position, new: Position, what: str) -> None:
        super().__init__(
            f"source position moved backwards: {new} is before the {what} position {old}; "
            "nothing of this transaction is committed (a source bug: report it with this "
            "message and the pipeline's log)"
        )
        self.old, self.new = old, new


def carried(offsets: Mapping[str, Any]) -> Position | None:
    """The typed position ``offsets`` carry, if they are :class:`Offsets`."""
    return offsets.position if isinstance(offsets, Offsets) else None


def rebuilt(offsets: Mapping[str, Any], items: Mapping[str, Any]) -> dict[str, Any]:
    """``items`` as offsets carrying the position ``offsets`` carry, if any (for a source that
    adds to or trims the offsets it hands on)."""
    position = carried(offsets)
    return dict(items) if position is None else Offsets(items, position)


def require_forward(old: Position | None, new: Position, what: str = "stored") -> None:
    """Refuse ``new`` when it comes before ``old``.

    Raises:
        PositionMovedBackwards: ``new < old``.
    """
    if old is not None and new < old:
        raise PositionMovedBackwards(old, new, what)


def check_forward(new: Position, stored: Mapping[str, Any]) -> None:
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
