"""What ``cdc verify`` finds for one table and one sink (:class:`TableComparison`), and the
readers of rows both sides are compared through."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

RowReader = Callable[[], Iterable[tuple[dict[str, Any], dict[str, Any]]]]
RowDecoding = Callable[[dict[str, Any]], dict[str, Any]]

#: What a table the source has not published a schema for yet is "missing" (not compared).
NO_SCHEMA = "(no schema published for this table yet)"


@dataclass
class TableComparison:
    """How one sink's copy of one table compares with the source."""

    table: str
    sink: str
    source_count: int = 0
    sink_count: int = 0
    source_checksum: str = ""
    sink_checksum: str = ""
    missing: list[Any] = field(default_factory=list)  # in the source, not in the sink
    extra: list[Any] = field(default_factory=list)  # in the sink, not in the source
    different: list[Any] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)  # columns of a few differences
    skipped: str | None = None  # kept in --json (always null): what unverifiable now says
    lag: dict[str, Any] | None = None  # the sink is behind the log: offsets, not compared
    # Not compared, and why: a transform cannot be applied to the source's rows, or a side
    # (the jsonl sink, the generator source) cannot be read back.
    unverifiable: str | None = None
    note: str | None = None  # what an ok comparison cannot show (a keyless table's duplicates)
    #: Every differing key's canonical JSON (missing, extra, different), not only the first
    #: ``limit``: what ``--repair`` re-reads. Not in --json (its length is unbounded).
    keys: tuple[set[bytes], set[bytes], set[bytes]] = field(
        default_factory=lambda: (set(), set(), set()), repr=False, compare=False
    )

    @property
    def state(self) -> str:
        """``ok``, ``different``, ``lagging`` (not compared) or ``unverifiable`` (not
        compared: the pipeline's transforms cannot be applied to rows read now, or a side
        cannot be read back)."""
        if self.unverifiable is not None:
            return "unverifiable"
        if self.lag is not None:
            return "lagging"
        return "different" if (self.missing or self.extra or self.different) else "ok"

    @property
    def compared(self) -> bool:
        """The rows were compared: not lagging, not unverifiable, the schema known."""
        return self.state in ("ok", "different") and self.missing != [NO_SCHEMA]

    @property
    def ok(self) -> bool:
        """Agreed. A lagging sink, a table a transform makes unverifiable and a sink that
        cannot be read back were not verified, so not ok: ``cdc verify`` exits 0 only for
        what it verified (``--sink`` leaves a sink out)."""
        return self.state == "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "sink": self.sink,
            "ok": self.ok,
            "state": self.state,
            "lag": self.lag,
            "source": {"count": self.source_count, "checksum": self.source_checksum},
            "sink_rows": {"count": self.sink_count, "checksum": self.sink_checksum},
            "missing_in_sink": self.missing,
            "extra_in_sink": self.extra,
            "different": self.different,
            "details": self.details,
            "skipped": self.skipped,
            "unverifiable": self.unverifiable,
            "note": self.note,
        }
