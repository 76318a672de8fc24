"""Each captured table's filters as the PostgreSQL source applies them (``source.tables``).

* Column lists: from PostgreSQL 15 the publication's column list, so excluded columns never
  leave the server, when the list keeps every replica identity column (the server refuses an
  ``UPDATE`` or ``DELETE`` of a table whose published columns do not cover its identity: a
  ``REPLICA IDENTITY FULL`` table excluding any column). Otherwise (PostgreSQL 14, such a
  table) the source drops them from each tuple before anything is converted.
* Masks: in the row converters and the row encoder (:mod:`cdc.transforms.masks`), on the value's
text.
* Row filters: the publication's row filter (15+) and the same predicate on every snapshot
  read (:mod:`.row_filters` checks it first).
* Operations: ``r`` left out means no snapshot reads the table; the others are dropped by the
  runtime.

**Renames.** The configuration names columns, PostgreSQL tracks them by ``attnum``: after
``RENAME COLUMN ssn TO ssn2`` a match by name would send ``ssn2`` raw, in the stream and in the
re-snapshot the rename triggers. So a filter is *bound* to its table (:meth:`TableFilter.bound`)
before any row is read: every column it masks or leaves out is looked up by name in the catalog
as it is then, and from there on the column keeps its mask or exclusion by ``attnum`` whatever it
is called (:meth:`TableFilter.resolve`), with a ``filter.column_renamed`` warning telling the
operator to rename it in the YAML. A name the YAML masks or leaves out that the table no longer
has stops the start (:meth:`TableFilter.check_live`): the column may have been renamed while the
pipeline was stopped, and nothing tells which new name is it. Excluding the new name of a column
by name as well as its ``attnum``'s is the stricter of both, so a column renamed *to* a masked
name is masked too.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from psycopg import sql

from cdc.contracts.errors import SourceMisconfigured
from cdc.support.logging import Logger
from cdc.transforms.filters import TableEntry
from cdc.transforms.masks import Mask, compile_mask
from connectors.postgres.config import PostgresSourceConfig

#: Publication column lists and row filters exist from this version.
PUBLICATION_FILTERS_MIN_VERSION = 150000

#: The live columns of a table, by ``attnum``.
_LIVE_COLUMNS = sql.SQL(
    "SELECT attnum::int, attname::text FROM pg_attribute"
    " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
)


class Rows(Protocol):
    """The catalog query a binding needs (:class:`connectors.postgres.catalog.Catalog`)."""

    def rows(self, query: sql.Composed | sql.SQL, params: Sequence[Any] = ()) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class Resolved:
    """A filter applied to one shape of its table.

    Attributes:
        kept: the positions of the columns that leave the source.
        masks: the masks of those columns, by their current names.
    """

    kept: tuple[int, ...]
    masks: Mapping[str, Mask]


@dataclass(frozen=True)
class TableFilter:
    """One table's entry, with its masks compiled.

    Attributes:
        hidden: once bound (:meth:`bound`), each column the entry masks or leaves out, by
            ``attnum``: the name it had then. ``None``: not bound, names only.
        logger: where renames and look-alike names are reported.
        omits_excluded: the publication's column list leaves the excluded columns out
            (:func:`pushes_columns`): the server never sends them, under any name.
    """

    entry: TableEntry
    masks: Mapping[str, Mask] = field(default_factory=dict)
    hidden: Mapping[int, str] | None = None
    logger: Logger | None = field(default=None, compare=False)
    omits_excluded: bool = False
    # The attnums the stream is known to have published before (:meth:`resolve`).
    _seen: set[int] = field(default_factory=set, compare=False, repr=False)
    # What was reported already: a shape is resolved again for every Relation and chunk.
    _reported: set[tuple[str, ...]] = field(default_factory=set, compare=False, repr=False)

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

    @property
    def hides_columns(self) -> bool:
        """Whether the entry masks or leaves out any column."""
        return self.narrows_columns or bool(self.masks)

    def keeps(self, column: str) -> bool:
        """Whether ``column`` leaves the source (by name only: see :meth:`keeps_column`)."""
        return self.entry.keeps(column)

    def hides(self, column: str) -> bool:
        """Whether the entry masks or leaves out ``column`` (by name)."""
        return column in self.masks or not self.entry.keeps(column)

    def keeps_column(self, column: str, attnum: int | None) -> bool:
        """Whether the column ``attnum`` called ``column`` now leaves the source: neither its
        name nor (once bound) the name it had when bound is left out."""
        origin = None if self.hidden is None or attnum is None else self.hidden.get(attnum)
        return self.keeps(column) and (origin is None or self.keeps(origin))

    def kept(self, columns: Sequence[str]) -> list[str]:
        """``columns`` without those the entry leaves out, in order."""
        return [c for c in columns if self.entry.keeps(c)]

    def allows(self, op: str) -> bool:
        return self.entry.allows(op)

    def named_hidden(self) -> list[str]:
        """The columns the entry masks or leaves out by name (see
        :meth:`cdc.transforms.filters.TableEntry.hidden_names`)."""
        return self.entry.hidden_names()

    def check_live(self, columns: Collection[str], carried: Collection[str] = ()) -> None:
        """Raises SourceMisconfigured: the entry masks or leaves out a column the table
        (``columns``: its live columns now) does not have, and that is not ``carried``."""
        missing = [c for c in self.named_hidden() if c not in columns and c not in carried]
        if not missing:
            return
        raise SourceMisconfigured(
            f"source.tables: {self.name} masks or leaves out {', '.join(missing)}, which the "
            f"table does not have (its columns now: {', '.join(columns)}). A column renamed "
            "since the pipeline last ran would leave the database under its new name without "
            "its mask or exclusion, so nothing of the table is read: name the column as it is "
            "called now in source.tables (or remove it, if it was dropped), then start once "
            "with on_transform_change: continue (records written since a rename the running "
            "pipeline saw carry its mask already) or resnapshot"
        )

    def bound(
        self,
        catalog: Rows,
        oid: int,
        logger: Logger | None = None,
        published: Mapping[str, int] | None = None,
        omits_excluded: bool = False,
    ) -> TableFilter:
        """The filter bound to table ``oid`` as the catalog has it now (see the module
        docstring); itself when bound already or when it hides no column.

        Args:
            published: the ``attnum`` of each column of the shape the pipeline published last
                (:mod:`connectors.postgres.assembly.shapes`): a masked column renamed while the
                pipeline was stopped is found by it.

        Raises:
            SourceMisconfigured: see :meth:`bind`.
        """
        if self.hidden is not None or not self.hides_columns:
            return self
        live = [(int(num), str(name)) for num, name in catalog.rows(_LIVE_COLUMNS, (oid,))]
        return self.bind(live, logger or self.logger, published or {}, omits_excluded)

    def bind(
        self,
        live: Sequence[tuple[int, str]],
        logger: Logger | None,
        published: Mapping[str, int] | None = None,
        omits_excluded: bool = False,
    ) -> TableFilter:
        """The filter bound to the live columns ``(attnum, name)`` of its table; the columns
        ``published`` last (else those live now) are the ones the stream is known to have.

        Raises:
            SourceMisconfigured: a hidden name the table does not have (:meth:`check_live`),
                or one that now names a column added since ``published`` while a column never
                published, that nothing hides, may be the one it left out, renamed.
        """
        names = [name for _, name in live]
        carried = self._carried(live, published or {})
        self.check_live(names, carried.values())
        hidden = {num: name for num, name in live if self.hides(name)}
        self._check_not_replaced(live, hidden, published or {})
        hidden.update(carried)
        seen = set((published or {}).values()) or {num for num, _ in live}
        found = replace(
            self,
            hidden=hidden,
            logger=logger,
            omits_excluded=omits_excluded,
            _seen=seen,
            _reported=set(),
        )
        found.report_twins(names)
        for num, origin in carried.items():
            found._renamed(origin, dict(live)[num])
        return found

    def _carried(
        self, live: Sequence[tuple[int, str]], published: Mapping[str, int]
    ) -> dict[int, str]:
        """Masked columns published under their configured name and called otherwise now, by
        ``attnum`` (a masked column's records carry its ``attnum``; a left-out one's do not)."""
        names = dict(live)
        return {
            published[m]: m
            for m in self.masks
            if published.get(m) in names and names[published[m]] != m
        }

    def _check_not_replaced(
        self,
        live: Sequence[tuple[int, str]],
        hidden: Mapping[int, str],
        published: Mapping[str, int],
    ) -> None:
        """Refuse a left-out name that belongs to a column newer than every published one
        while an older column, never published and hidden by nothing, may be the one it named
        (``RENAME password_hash TO pwh2, ADD password_hash``, while the pipeline was stopped)."""
        if not published or self.entry.columns is None or not self.entry.columns.exclude:
            return
        newest = max(published.values())
        seen = set(published.values())
        exclude = self.entry.columns.exclude
        newer = [n for n in hidden if n > newest and hidden[n] in exclude]
        suspects = [
            name
            for num, name in live
            if newer and num < min(newer) and num not in seen and num not in hidden
        ]
        if newer and suspects:
            raise SourceMisconfigured(
                f"source.tables: {self.name} leaves out "
                f"{', '.join(hidden[n] for n in newer)}, a column added "
                f"since the pipeline last ran, while {', '.join(suspects)}, never published, "
                "may be the column it left out, renamed: leave out the new name(s) too in "
                "source.tables (or drop the column the name now belongs to)"
            )

    def report_twins(self, columns: Collection[str]) -> None:
        """Warn (once each) of the :meth:`case_twins` among ``columns``."""
        for column, hidden in self.entry.case_twins(list(columns)):
            self._report(
                ("twin", column),
                "filter.case_twin",
                column=column,
                like=hidden,
                fix=f"its values leave the database as they are: mask or leave out {column!r} "
                f"too in source.tables (or rename it) if it holds what {hidden!r} hides",
            )

    def resolve(
        self, names: Sequence[str], ids: Sequence[int | None], key: Collection[str] = ()
    ) -> Resolved:
        """Which columns of a shape (``names``, their ``attnum`` where known) leave the source,
        and their masks: a column keeps the mask or exclusion it had when bound, whatever it
        is called now.

        While a bound hidden column the server sends is not found by its ``attnum`` (the
        stream is behind later DDL: see :mod:`connectors.postgres.assembly.evolution`), the
        catalog's names no longer say which column is which: the hidden one may be there under a
        name the catalog has forgotten, or under one it now gives a newer column (``RENAME ssn
        TO ssn2``, ``RENAME ssn2 TO x``, ``ADD ssn2``: ``ssn2`` looks up as the new column). So
        every column not known to the stream before, by ``attnum``, is left out then (key
        columns aside, which are never hidden other than by hash, and columns hidden by
        name anyway).
        """
        known = [*ids, *([None] * (len(names) - len(ids)))][: len(names)]
        lost = self._lost(known)
        kept: list[int] = []
        masks: dict[str, Mask] = {}
        for n, (column, attnum) in enumerate(zip(names, known, strict=True)):
            origin = None if attnum is None else (self.hidden or {}).get(attnum)
            if origin is not None and origin != column:
                self._renamed(origin, column)
            if not self.keeps_column(column, attnum):
                continue
            if lost and column not in key and not self.hides(column) and attnum not in self._seen:
                self._doubtful(column)
                continue
            mask = self.masks.get(origin) if origin is not None else None
            mask = mask or self.masks.get(column)
            if mask is not None:
                masks[column] = mask
            kept.append(n)
        if self.hidden is not None:
            self._seen.update(i for i in (known[n] for n in kept) if i is not None)
            self.report_twins(names)
        return Resolved(tuple(kept), masks)

    def _lost(self, known: Sequence[int | None]) -> set[int]:
        """The bound hidden columns the server sends that a shape (its ``attnum`` each, where
        known) does not have by ``attnum``; a column the publication's column list leaves
        out is never sent, so its absence says nothing."""
        found = {i for i in known if i is not None}
        return {
            num
            for num, origin in (self.hidden or {}).items()
            if num not in found and not (self.omits_excluded and not self.keeps(origin))
        }

    def _renamed(self, origin: str, column: str) -> None:
        what = "mask" if origin in self.masks else "exclusion"
        self._report(
            ("renamed", origin, column),
            "filter.column_renamed",
            column=column,
            was=origin,
            keeps=what,
            fix=f"rename {origin!r} to {column!r} in source.tables: the column keeps its {what} "
            "under its new name until this pipeline stops, and the next start refuses a name "
            "the table no longer has",
        )

    def _doubtful(self, column: str) -> None:
        self._report(
            ("doubtful", column),
            "filter.column_left_out",
            column=column,
            reason="a masked or left-out column is missing from the table's shape (the stream is "
            "behind later DDL, or the column was dropped), and this column, new to the stream, "
            "may be that one under another name",
            fix=f"once the stream has caught up, `cdc snapshot PIPELINE_FILE --table {self.name}`"
            " re-reads its values; if the masked or left-out column was dropped, remove it from"
            " source.tables and restart",
        )

    def _report(self, seen: tuple[str, ...], event: str, **fields: Any) -> None:
        if seen in self._reported or self.logger is None:
            return
        self._reported.add(seen)
        self.logger.warning(event, table=self.name, **fields)

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


def bind_filters(
    catalog: Rows,
    filters: Mapping[str, TableFilter],
    tables: Mapping[str, int],
    logger: Logger,
    published: Mapping[str, Mapping[str, int]] | None = None,
    pushed: Collection[str] = (),
) -> dict[str, TableFilter]:
    """``filters`` bound to their tables (``schema.table`` -> oid), those bound already kept;
    ``published``: the ``attnum`` of each column each table was last published with;
    ``pushed``: the tables whose publication column list leaves their excluded columns out.

    Raises:
        SourceMisconfigured: a filter names a column its table does not have (see
            :meth:`TableFilter.check_live`).
    """
    return {
        name: (
            found.bound(catalog, tables[name], logger, (published or {}).get(name), name in pushed)
            if name in tables
            else found
        )
        for name, found in filters.items()
    }


def pushes_columns(table_filter: TableFilter, identity: Sequence[str], version: int) -> bool:
    """Whether the publication's column list can leave out what ``table_filter`` excludes:
    on PostgreSQL 15+, when it keeps every replica identity column (``identity``)."""
    if not table_filter.narrows_columns or version < PUBLICATION_FILTERS_MIN_VERSION:
        return False
    return all(table_filter.keeps(c) for c in identity)
