"""The publication's column lists and row filters (PostgreSQL 15+), checked before they count.

What goes to the server: a table's ``where`` as its row filter, and its column selection as
its column list when that keeps every replica identity column (else the source drops the
columns itself, :mod:`connectors.postgres.publication.filters`).

A row filter the server accepts can still break the application: PostgreSQL refuses every
``UPDATE`` and ``DELETE`` of a table whose publication filters on a column outside its replica
identity ("Column used in the publication WHERE expression is not part of the replica
identity"), and it finds out only at the first such statement. So the filters are set inside a
transaction, the columns each resulting filter uses are read back from the catalog
(``pg_publication_rel.prqual``) and compared with the replica identity, and the transaction is
committed only when every filter passes (and only when something changed). Expressions the
server itself refuses (a mutable function, an unknown column) fail the statement, with the
server's reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from cdc.contracts.errors import SourceFatal, SourceMisconfigured
from cdc.support.logging import Logger
from connectors.postgres.catalog import Catalog, TableInfo, published_column
from connectors.postgres.publication.filters import (
    PLAIN,
    PUBLICATION_FILTERS_MIN_VERSION,
    TableFilter,
    pushes_columns,
)
from connectors.postgres.publication.spec import TableSpec, ensure_publication, set_tables_statement

#: Every column of a table, with whether it is in the replica identity (``{}``: a condition
#: on ``pg_attribute`` row ``a``, or nothing).
_COLUMNS = sql.SQL(
    "SELECT a.attname::text, a.attnum::int, CASE c.relreplident"
    " WHEN 'f' THEN true"
    " WHEN 'd' THEN EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid"
    "  AND i.indisprimary AND a.attnum = ANY(i.indkey))"
    " WHEN 'i' THEN EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid"
    "  AND i.indisreplident AND a.attnum = ANY(i.indkey))"
    " ELSE false END"
    " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
    " WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped{} ORDER BY a.attnum"
)

#: What the publication holds per table now: its column list (names) and row filter (as the
#: server prints it and as a node tree).
_HELD = sql.SQL(
    "SELECT n.nspname::text || '.' || c.relname::text,"
    " CASE WHEN r.prattrs IS NULL THEN NULL ELSE ARRAY(SELECT a.attname::text"
    "  FROM pg_attribute a WHERE a.attrelid = r.prrelid AND a.attnum = ANY(r.prattrs)"
    "  ORDER BY a.attnum) END,"
    " pg_get_expr(r.prqual, r.prrelid), r.prqual::text, r.prrelid::int8"
    " FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid"
    " JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE p.pubname = %s ORDER BY 1"
)

_VAR_ATTNO = re.compile(r"\{VAR :varno 1 :varattno (\d+)")


@dataclass(frozen=True, slots=True)
class Held:
    """One table as the publication holds it."""

    columns: tuple[str, ...] | None
    where: str | None
    where_columns: frozenset[int]
    oid: int


def table_columns(
    catalog: Catalog, oid: int, published: bool = True
) -> list[tuple[str, int, bool]]:
    """``(name, attnum, in replica identity)`` of each column of table ``oid`` (``published``:
    of each column pgoutput publishes)."""
    condition: sql.Composable = sql.SQL("")
    if published:
        condition = sql.SQL(" AND {}").format(published_column("a", catalog.server_version))
    query = _COLUMNS.format(condition)
    return [(str(n), int(num), bool(ident)) for n, num, ident in catalog.rows(query, (oid,))]


def wanted_specs(
    catalog: Catalog, tables: Sequence[TableInfo], filters: Mapping[str, TableFilter]
) -> dict[str, TableSpec]:
    """The publication's entry for each of ``tables``: with the row filter and, where it can
    (:func:`~connectors.postgres.publication.filters.pushes_columns`), the column list.

    Raises:
        SourceMisconfigured: a row filter below PostgreSQL 15 (the server cannot apply one).
    """
    version = catalog.server_version
    specs = {}
    for info in tables:
        table_filter = filters.get(info.name, PLAIN)
        where = table_filter.where
        if where is not None and version < PUBLICATION_FILTERS_MIN_VERSION:
            raise SourceMisconfigured(
                f"source.tables: the row filter (where) of {info.name} needs PostgreSQL 15 or "
                f"later, where publications filter rows; the server runs {version // 10000}"
            )
        columns = None
        if table_filter.narrows_columns:
            described = table_columns(catalog, info.oid)
            identity = [name for name, _, ident in described if ident]
            if pushes_columns(table_filter, identity, version):
                columns = tuple(n for n, num, _ in described if table_filter.keeps_column(n, num))
        specs[info.name] = TableSpec(info.schema, info.table, columns, where)
    return specs


def held(catalog: Catalog, publication: str) -> dict[str, Held]:
    """What the publication holds per table now (PostgreSQL 15+)."""
    found = {}
    for name, columns, where, tree, oid in catalog.rows(_HELD, (publication,)):
        attnos = frozenset(int(n) for n in _VAR_ATTNO.findall(tree or ""))
        found[str(name)] = Held(
            None if columns is None else tuple(columns), where, attnos, int(oid)
        )
    return found


def sync_filters(
    catalog: Catalog,
    publication: str,
    specs: Sequence[TableSpec],
    role: str,
    logger: Logger,
) -> None:
    """Make the publication hold exactly ``specs``' column lists and row filters, and check
    each row filter against its table's replica identity first (see the module docstring).

    Nothing is done when no table is filtered, in the publication or in ``specs``.

    Raises:
        SourceMisconfigured: a row filter on a column outside the replica identity; a filter
            the server refuses.
        SourceFatal: the role may not alter the publication (the message has the DBA's
            statement).
    """
    if catalog.server_version < PUBLICATION_FILTERS_MIN_VERSION:
        return
    before = held(catalog, publication)
    if not any(s.filtered for s in specs) and not any(
        h.columns is not None or h.where is not None for h in before.values()
    ):
        return
    statement = set_tables_statement(publication, specs)
    try:
        after = _trial(catalog, statement, publication, before)
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction) as exc:
        # Not ours to change (a DBA's publication, or a standby's read-only catalog): it must
        # hold the filters already.
        _check_held(catalog, before, specs, statement, role, publication, exc)
        return
    if after is not None:
        logger.info(
            "publication.filters_set",
            publication=publication,
            tables={n: {"columns": h.columns, "where": h.where} for n, h in after.items()},
        )


class _Unchanged(Exception):
    """The trial changed nothing: roll it back."""


def _trial(
    catalog: Catalog, statement: sql.Composed, publication: str, before: Mapping[str, Held]
) -> dict[str, Held] | None:
    """Set the tables in a transaction, check the result, commit it if it changed anything;
    returns what the publication holds then (``None``: nothing changed)."""
    try:
        with catalog.conn.transaction():
            catalog.run(statement)
            after = held(catalog, publication)
            check_identity(catalog, after)
            if after == before:
                raise _Unchanged
    except _Unchanged:
        return None
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
        raise
    except (psycopg.ProgrammingError, psycopg.NotSupportedError, psycopg.DataError) as exc:
        raise SourceMisconfigured(_refused(catalog, statement, exc)) from exc
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:
        raise SourceMisconfigured(_refused(catalog, statement, exc)) from exc
    return after


def _refused(catalog: Catalog, statement: sql.Composed, exc: psycopg.Error) -> str:
    detail = exc.diag.message_detail
    reason = exc.diag.message_primary or str(exc)
    return (
        f"the server refused {statement.as_string(catalog.conn)}: {reason}"
        + (f" ({detail})" if detail else "")
        + " (source.tables: a row filter is a plain expression over the table's own columns,"
        " with immutable functions only)"
    )


def check_identity(catalog: Catalog, tables: Mapping[str, Held]) -> None:
    """Raises SourceMisconfigured: a row filter uses a column outside its table's replica
    identity."""
    for name, entry in tables.items():
        if not entry.where_columns:
            continue
        columns = {
            attnum: (column, ident)
            for column, attnum, ident in table_columns(catalog, entry.oid, published=False)
        }
        outside = sorted(
            columns[n][0] for n in entry.where_columns if n in columns and not columns[n][1]
        )
        if outside:
            table = sql.Identifier(*name.split(".", 1)).as_string(catalog.conn)
            raise SourceMisconfigured(
                f"source.tables: the row filter of {name} uses {', '.join(outside)}, outside "
                "its replica identity: PostgreSQL would then refuse every UPDATE and DELETE of "
                "the table (a publication that publishes them may filter only on replica "
                "identity columns). Filter on key columns only, or let the old row carry every "
                f"column: ALTER TABLE {table} REPLICA IDENTITY FULL;"
            )


def _check_held(
    catalog: Catalog,
    before: Mapping[str, Held],
    specs: Sequence[TableSpec],
    statement: sql.Composed,
    role: str,
    publication: str,
    exc: psycopg.Error,
) -> None:
    """A role that may not alter the publication: what it holds must be what ``specs`` say
    already (column lists exactly, row filters as the server prints them, spacing aside)."""
    different = [
        s.name
        for s in specs
        if s.name not in before
        or _column_set(before[s.name].columns) != _column_set(s.columns)
        or _spelling(before[s.name].where) != _spelling(s.where)
    ]
    if different:
        raise SourceFatal(
            f"publication {publication!r} does not hold the column lists and row filters of "
            f"{', '.join(different)}, and role {role!r} may not change it "
            f"({exc.diag.message_primary}); a DBA must run: "
            f"{statement.as_string(catalog.conn)};"
        ) from exc
    check_identity(catalog, before)


def _column_set(columns: Sequence[str] | None) -> frozenset[str] | None:
    return None if columns is None else frozenset(columns)


def _spelling(where: str | None) -> str:
    """A row filter without spaces, parentheses and case: the server prints ``tenant = 42``
    as ``(tenant = 42)``."""
    return re.sub(r"[\s()]", "", where or "").lower()


def prepare_publication(
    catalog: Catalog,
    publication: str,
    tables: Sequence[TableInfo],
    role: str,
    logger: Logger,
    filters: Mapping[str, TableFilter],
) -> None:
    """The publication of ``tables``, with their filters: created or completed
    (:func:`~connectors.postgres.publication.spec.ensure_publication`), then its column lists and
    row filters made what ``filters`` say (:func:`sync_filters`), in one transaction that a
    refused filter rolls back whole.

    Raises:
        SourceFatal: see both.
    """
    specs = wanted_specs(catalog, tables, filters)
    # One transaction: a publication created (or a table added) with a filter the checks then
    # refuse must not outlive them, not even for a moment the stream could decode it in.
    with catalog.conn.transaction():
        ensure_publication(catalog, publication, tables, role, logger, specs)
        sync_filters(catalog, publication, [specs[t.name] for t in tables], role, logger)
