"""Which stored encoding each record of a topic was written under, by its offset.

After an accepted envelope change (:func:`cdc.log.encoding.ensure_encoding`) a topic holds
records of two or more encodings: those before the offsets the change stored in ``since`` are
in the older one. A reader decodes each record with its own :class:`Era`, never the newest
options for all.

The choice is made once per run of records, not per record: for a ``(topic, partition)`` the
eras' first offsets form a short sorted list, bisected when a batch enters the partition or
crosses the next boundary; every other record only compares its offset with the run's end.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from cdc.envelope.options import EnvelopeOptions
from cdc.log.encoding import StoredEncoding

_END: Final = 1 << 63


@dataclass(frozen=True, slots=True, eq=False)
class Era:
    """One encoding of a log's history: what the records written under it are decoded with.

    Attributes:
        options: the envelope options (``None``: the legacy encoding).
        only: the log's only encoding, so every record is in it (readers skip the bisecting).
    """

    options: EnvelopeOptions | None
    only: bool = False


class Offsets(Protocol):
    """A record's place in the log, all an era is chosen by."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...


_Bounds = tuple[list[int], list[Era]]


class Eras:
    """A log's stored encodings, oldest first, and where each starts in each partition."""

    def __init__(self, stored: StoredEncoding) -> None:
        history = [StoredEncoding.from_json(p) for p in stored.previous] + [stored]
        self._since = [h.since for h in history]
        only = len(history) == 1
        self._eras = [Era(h.envelope(), only) for h in history]
        self._bounds: dict[tuple[str, int], _Bounds] = {}

    @property
    def newest(self) -> Era:
        return self._eras[-1]

    @property
    def all(self) -> tuple[Era, ...]:
        """Every era, newest first."""
        return tuple(reversed(self._eras))

    def at(self, topic: str, partition: int, offset: int) -> tuple[Era, int]:
        """The era of the record at ``offset``, and the offset where the next era starts."""
        starts, eras = self._partition(topic, partition)
        index = bisect.bisect_right(starts, offset) - 1
        end = starts[index + 1] if index + 1 < len(starts) else _END
        return eras[max(index, 0)], end

    def of(self, records: Sequence[Offsets]) -> list[Era]:
        """The era of each of ``records`` (any order, any partitions)."""
        if len(self._eras) == 1:
            return [self._eras[0]] * len(records)
        out: list[Era] = []
        topic, partition, start, end = "", -1, 0, -1
        era = self._eras[-1]
        for record in records:
            offset = record.offset
            if not (start <= offset < end and record.partition == partition) or (
                record.topic != topic
            ):
                topic, partition, start = record.topic, record.partition, offset
                era, end = self.at(topic, partition, offset)
            out.append(era)
        return out

    def _partition(self, topic: str, partition: int) -> _Bounds:
        found = self._bounds.get((topic, partition))
        if found is None:
            found = self._bounds[(topic, partition)] = self._build(topic, partition)
        return found

    def _build(self, topic: str, partition: int) -> _Bounds:
        # Newest first: an era is kept only if it starts before the newer one (an era with no
        # record here, or a topic created again since, starts where a newer one does).
        starts: list[int] = []
        eras: list[Era] = []
        limit = _END
        for since, era in zip(reversed(self._since), reversed(self._eras), strict=True):
            start = int(since.get(topic, {}).get(str(partition), 0))
            if start < limit:
                starts.append(start)
                eras.append(era)
                limit = start
        starts.reverse()
        eras.reverse()
        return starts, eras


def eras_of(stored: dict[str, Any] | StoredEncoding | None) -> Eras | None:
    """The :class:`Eras` of a stored encoding (``None`` where none is stored)."""
    if stored is None:
        return None
    return Eras(stored if isinstance(stored, StoredEncoding) else StoredEncoding.from_json(stored))
