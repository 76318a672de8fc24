"""``cdc doctor``'s checks of the ``source.tables`` filters of the PostgreSQL source.

What a start would refuse, found without starting: a row filter below PostgreSQL 15, one that
is not a valid expression over the table's columns, one using a function that is not a
built-in immutable one, one on a column outside the replica identity (PostgreSQL would then
refuse every UPDATE and DELETE of the table), a key column left out or masked other than by
hash, and a masked or left-out column the table does not have (renamed: its values would leave
under the new name), with a warning for one named like it only by case. The row filter's
columns and functions are read from the dependencies of a temporary view over it, made in a
transaction that is rolled back: nothing changes.
"""

from __future__ import annotations

import re

import psycopg
from psycopg import sql

from cdc.contracts.checks import Check, failed, passed, warned
from cdc.transforms.filters import TableEntry
from connectors.postgres.catalog import Catalog
from connectors.postgres.doctor.tables import TableFacts
from connectors.postgres.publication.filters import PUBLICATION_FILTERS_MIN_VERSION
from connectors.postgres.publication.row_filters import table_columns

#: The columns of the table that view ``cdc_doctor_where`` reads (built-in functions are
#: pinned: they have no dependency rows, so they are found in the view's rule instead).
_COLUMNS_USED = sql.SQL(
    "SELECT DISTINCT d.refobjsubid FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid"
    " WHERE d.classid = 'pg_rewrite'::regclass AND w.ev_class = 'cdc_doctor_where'::regclass"
    " AND d.refclassid = 'pg_class'::regclass AND d.refobjid = %s AND d.refobjsubid > 0"
)
_RULE = sql.SQL(
    "SELECT ev_action::text FROM pg_rewrite WHERE ev_class = 'cdc_doctor_where'::regclass"
)
#: Functions a publication's row filter may not call: user-defined ones, and mutable ones.
_REFUSED = sql.SQL(
    "SELECT DISTINCT proname::text FROM pg_proc WHERE oid = ANY(%s)"
    " AND (oid >= 16384 OR provolatile <> 'i')"
)
_LIVE_COLUMNS = sql.SQL(
    "SELECT a.attname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s"
    " AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)
_FUNCTION_IDS = re.compile(r":(?:funcid|opfuncid) (\d+)")


class _Rollback(Exception):
    """Ends the checking transaction."""


def filter_checks(catalog: Catalog, facts: TableFacts, entry: TableEntry) -> list[Check]:
    """The checks of one table's filters (none for a table captured whole)."""
    if not facts.exists or not entry.filtered:
        return []
    checks = [_key(facts, entry)]
    if entry.hidden_names():
        checks.append(_named(catalog, facts, entry))
    if isinstance(entry.where, str):
        checks.append(_where(catalog, facts, entry.where))
    return checks


def _key(facts: TableFacts, entry: TableEntry) -> Check:
    label = f"table {facts.name}: key columns and filters"
    dropped = [c for c in facts.primary_key if not entry.keeps(c)]
    masked = [c for c in facts.primary_key if c in entry.mask and entry.mask[c].type != "hash"]
    if dropped or masked:
        detail = f"the key ({', '.join(facts.primary_key)}) is made of columns the filters " + (
            f"leave out ({', '.join(dropped)})" if dropped else f"mask ({', '.join(masked)})"
        )
        return failed(label, detail, "keep the key columns; hash them if they must be hidden")
    return passed(label, "every key column is captured (hashed where masked)")


def _named(catalog: Catalog, facts: TableFacts, entry: TableEntry) -> Check:
    """The masked and left-out columns exist: a renamed one would leave the database under
    its new name (the start refuses such a table:
    :mod:`connectors.postgres.publication.filters`)."""
    label = f"table {facts.name}: masked and left-out columns"
    live = [str(name) for (name,) in catalog.rows(_LIVE_COLUMNS, (facts.schema, facts.table))]
    missing = [c for c in entry.hidden_names() if c not in live]
    if missing:
        return failed(
            label,
            f"names {', '.join(missing)}, which the table does not have (renamed or dropped?): "
            "a start refuses it",
            "name the columns as they are called now in source.tables",
        )
    twins = entry.case_twins(live)
    if twins:
        return warned(
            label,
            ", ".join(f"{c!r} is named like {h!r} only by case, and not hidden" for c, h in twins),
            "mask or leave it out too if it holds what the other hides",
        )
    return passed(label, f"{', '.join(entry.hidden_names())}: each is a column of the table")


def _where(catalog: Catalog, facts: TableFacts, where: str) -> Check:
    label = f"table {facts.name}: row filter"
    version = catalog.server_version
    if version < PUBLICATION_FILTERS_MIN_VERSION:
        return failed(
            label,
            f"PostgreSQL {version // 10000} cannot filter a publication's rows",
            "upgrade to PostgreSQL 15 or later, or remove where",
        )
    try:
        columns, functions = _uses(catalog, facts, where)
    except psycopg.Error as exc:
        return failed(
            label, f"not an expression over the table: {exc.diag.message_primary}", "fix where"
        )
    if functions:
        return failed(
            label,
            f"uses {', '.join(functions)}: a row filter may call built-in immutable functions only",
            "rewrite where without them",
        )
    outside = [c for c in columns if c not in _identity(catalog, facts)]
    if outside:
        table = sql.Identifier(facts.schema, facts.table).as_string(catalog.conn)
        return failed(
            label,
            f"uses {', '.join(outside)}, outside the replica identity: PostgreSQL would refuse "
            "every UPDATE and DELETE of the table",
            f"filter on key columns only, or run: ALTER TABLE {table} REPLICA IDENTITY FULL;",
        )
    return passed(label, f"{where} (on {', '.join(columns) or 'no column'})")


def _uses(catalog: Catalog, facts: TableFacts, where: str) -> tuple[list[str], list[str]]:
    """The columns ``where`` reads and its functions a row filter may not call."""
    names = {num: name for name, num, _ in table_columns(catalog, _oid(catalog, facts), False)}
    found: tuple[list[str], list[str]] = ([], [])
    view = sql.SQL("CREATE TEMPORARY VIEW cdc_doctor_where AS SELECT 1 FROM {} WHERE ({})").format(
        # The operator's own expression, as the publication takes it (trusted configuration).
        sql.Identifier(facts.schema, facts.table),
        sql.SQL(where),
    )
    try:
        with catalog.conn.transaction():
            catalog.run(view)
            for (attnum,) in catalog.rows(_COLUMNS_USED, (_oid(catalog, facts),)):
                found[0].append(names[int(attnum)])
            [(rule,)] = catalog.rows(_RULE)
            functions = [int(n) for n in _FUNCTION_IDS.findall(str(rule))]
            found[1].extend(str(r[0]) for r in catalog.rows(_REFUSED, (functions,)))
            raise _Rollback
    except _Rollback:
        pass
    return sorted(set(found[0])), sorted(set(found[1]))


def _oid(catalog: Catalog, facts: TableFacts) -> int:
    [(oid,)] = catalog.rows(
        sql.SQL("SELECT {}::regclass::oid::int8").format(
            sql.Literal(sql.Identifier(facts.schema, facts.table).as_string(catalog.conn))
        )
    )
    return int(oid)


def _identity(catalog: Catalog, facts: TableFacts) -> set[str]:
    return {name for name, _, ident in table_columns(catalog, _oid(catalog, facts), False) if ident}
