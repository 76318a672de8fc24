"""Each captured table's filters as the PostgreSQL source applies them (``source.tables``).

* Column lists: from PostgreSQL 15 the publication's column list, so excluded columns never
  leave the server, when the list keeps every replica identity column (the server refuses an
  ``UPDATE`` or ``DELETE`` of a table whose published columns do not cover its identity: a
  ``REPLICA IDENTITY FULL`` table excluding any column). Otherwise (PostgreSQL 14, such a
  table) the source drops them from each tuple before anything is converted.
* Masks: in the row converters and the row encoder (:mod:`cdc.masks`), on the value's text.
* Row filters: the publication's row filter (15+) and the same predicate on every snapshot
  read (:mod:`.publication_filters` checks it first).
* Operations: ``r`` left out means no snapshot reads the table; the others are dropped by the
  runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cdc.errors import SourceMisconfigured
from cdc.filters import TableEntry
from cdc.masks import Mask, compile_mask
from connectors.postgres.config import PostgresSourceConfig

#: Publication column lists and row filters exist from this version.
PUBLICATION_FILTERS_MIN_VERSION = 150000


@dataclass(frozen=True)
class TableFilter:
    """One table's entry, with its masks compiled."""

    entry: TableEntry
    masks: Mapping[str, Mask] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def where(self) -> str | None:
        """The row filter, an SQL expression over the table's columns."""
        where = self.entry.where
        return where if isinstance(where, str) else None

    @property
    def narrows_columns(self) -> bool:
        return self.entry.columns is not None

    def keeps(self, column: str) -> bool:
        """Whether ``column`` leaves the source."""
        return self.entry.keeps(column)

    def kept(self, columns: Sequence[str]) -> list[str]:
        """``columns`` without those the entry leaves out, in order."""
        return [c for c in columns if self.entry.keeps(c)]

    def allows(self, op: str) -> bool:
        return self.entry.allows(op)

    def check_key(self, key: Sequence[str]) -> None:
        """Raises SourceMisconfigured: a key column excluded, or masked other than by ``hash`` (the
        record key is built from the key columns' values, so a record needs them, and only a
        hash keeps two keys apart)."""
        excluded = [c for c in key if not self.keeps(c)]
        if excluded:
            raise SourceMisconfigured(
                f"source.tables: {self.name} leaves out key column(s) {excluded}; the record "
                "key is made of them (mask them with hash instead)"
            )
        masked = [c for c in key if c in self.masks and self.masks[c].kind != "hash"]
        if masked:
            raise SourceMisconfigured(
                f"source.tables: {self.name} masks key column(s) {masked} with "
                f"{self.masks[masked[0]].kind}; a key column may only be hashed (equal keys "
                "must stay equal, different ones different)"
            )


PLAIN = TableFilter(TableEntry(name="_._"))


def table_filters(config: PostgresSourceConfig) -> dict[str, TableFilter]:
    """The filter of every captured table, masks compiled once (plugins loaded)."""
    key = config.mask_key_bytes()
    return {entry.name: _compiled(entry, key) for entry in config.tables}


def _compiled(entry: TableEntry, key: bytes | None) -> TableFilter:
    masks = {
        column: compile_mask(spec.type, n=spec.n, key=key, plugin=spec.name, options=spec.options)
        for column, spec in entry.mask.items()
    }
    return TableFilter(entry, masks)


def pushes_columns(table_filter: TableFilter, identity: Sequence[str], version: int) -> bool:
    """Whether the publication's column list can leave out what ``table_filter`` excludes:
    on PostgreSQL 15+, when it keeps every replica identity column (``identity``)."""
    if not table_filter.narrows_columns or version < PUBLICATION_FILTERS_MIN_VERSION:
        return False
    return all(table_filter.keeps(c) for c in identity)
