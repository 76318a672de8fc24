"""``cdc doctor``'s per-table and publication checks for the PostgreSQL source.

A table needs: to exist, SELECT for the role (the snapshot reads it, the TOAST fill may), a key
(a primary key, ``source.key_columns`` or a replica identity that names one), and a replica
identity under which the server will publish its updates and deletes at all: with ``DEFAULT``
and no primary key, or ``NOTHING``, PostgreSQL refuses every UPDATE and DELETE on a table once
it is in a publication that publishes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from psycopg import sql

from cdc.contracts.checks import Check, failed, passed
from connectors.postgres.catalog import Catalog
from connectors.postgres.lifecycle import publication_tables

_TABLE = sql.SQL(
    "SELECT c.relreplident::text, has_table_privilege(c.oid, 'SELECT'),"
    " pg_has_role(c.relowner, 'USAGE'),"
    " ARRAY(SELECT a.attname::text FROM pg_index i"
    "  CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)"
    "  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
    "  WHERE i.indrelid = c.oid AND i.indisprimary ORDER BY k.ord)"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')"
)

_PUBLICATION = sql.SQL(
    "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = %s"
)

_IDENTITY = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}


@dataclass(frozen=True, slots=True)
class TableFacts:
    """What the catalog says about one configured table (``exists`` False: nothing else)."""

    schema: str
    table: str
    exists: bool
    identity: str = "d"
    readable: bool = False
    owned: bool = False
    primary_key: tuple[str, ...] = ()
    toastable: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"

    @classmethod
    def read(cls, catalog: Catalog, schema: str, table: str) -> TableFacts:
        found = catalog.rows(_TABLE, (schema, table))
        if not found:
            return cls(schema, table, False)
        identity, readable, owned, key = found[0]
        toastable = tuple(catalog.toastable_columns(schema, table))
        return cls(schema, table, True, identity, readable, owned, tuple(key), toastable)


def table_checks(
    catalog: Catalog, facts: TableFacts, role: str, key_columns: Sequence[str] | None
) -> list[Check]:
    """Existence and SELECT, primary key, replica identity, and the TOAST-able columns."""
    label = f"table {facts.name}"
    if not facts.exists:
        fix = f"create it, or take {facts.name} out of source.tables"
        return [failed(label, "does not exist (or is not a table)", fix)]
    checks = [_select(catalog, facts, role), _key(catalog, facts, key_columns)]
    checks.append(_identity(catalog, facts))
    if facts.toastable and facts.identity != "f":
        columns = ", ".join(facts.toastable)
        detail = (
            f"({columns}) can be stored out of line: an UPDATE that leaves one unchanged does "
            "not resend it, and cdc fills it in from the log's latest image of the row"
        )
        checks.append(passed(f"{label}: TOAST columns", detail))
    return checks


def _select(catalog: Catalog, facts: TableFacts, role: str) -> Check:
    label = f"table {facts.name}: SELECT"
    if facts.readable:
        return passed(label, f"role {role} may read it")
    grant = sql.SQL("GRANT SELECT ON {} TO {};").format(
        sql.Identifier(facts.schema, facts.table), sql.Identifier(role)
    )
    detail = f"role {role} may not read it (the snapshot and the TOAST fill do)"
    return failed(label, detail, f"run: {grant.as_string(catalog.conn)}")


def _key(catalog: Catalog, facts: TableFacts, key_columns: Sequence[str] | None) -> Check:
    label = f"table {facts.name}: primary key"
    if facts.primary_key:
        return passed(label, f"({', '.join(facts.primary_key)})")
    if key_columns:
        columns = ", ".join(key_columns)
        return passed(label, f"none; records keyed by source.key_columns ({columns})")
    if facts.identity == "i":
        return passed(label, "none; records keyed by the replica identity index")
    if facts.identity == "f":
        return passed(
            label,
            "none; REPLICA IDENTITY FULL: records keyed by every column, so identical rows "
            "collapse into one in the sinks (add a primary key to keep duplicates)",
        )
    table = sql.Identifier(facts.schema, facts.table).as_string(catalog.conn)
    fix = (
        f"add one (ALTER TABLE {table} ADD PRIMARY KEY (...);), or name its key columns in "
        f"source.key_columns['{facts.name}'], or run: ALTER TABLE {table} REPLICA IDENTITY FULL;"
    )
    return failed(label, "none, and nothing else names a key for its records", fix)


def _identity(catalog: Catalog, facts: TableFacts) -> Check:
    label = f"table {facts.name}: replica identity"
    identity = _IDENTITY.get(facts.identity, facts.identity)
    blind = facts.identity == "n" or (facts.identity == "d" and not facts.primary_key)
    if not blind:
        return passed(label, identity)
    full = sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL;").format(
        sql.Identifier(facts.schema, facts.table)
    )
    what = "and no primary key" if facts.identity == "d" else "(no old row at all)"
    detail = (
        f"{identity} {what}: once published, the server refuses its UPDATEs and DELETEs "
        "(they cannot be streamed)"
    )
    return failed(label, detail, f"run: {full.as_string(catalog.conn)} (or add a primary key)")


def publication_checks(
    catalog: Catalog,
    name: str,
    tables: Sequence[TableFacts],
    role: str,
    superuser: bool,
    may_create_in_db: bool,
    on_standby: bool = False,
) -> list[Check]:
    """The publication exists and holds every configured table, or the role can make it so:
    a first start creates it (CREATE on the database and ownership of the tables, or
    superuser) and adds the tables it lacks (ownership). A standby creates nothing: there it
    must come from the primary."""
    label = f"publication {name}"
    existing = [t for t in tables if t.exists]
    published = publication_tables(catalog, name)
    if published is None and not existing:
        return [failed(label, "does not exist, and no table of source.tables exists", "see above")]
    if published is None:
        create = sql.SQL("CREATE PUBLICATION {} FOR TABLE {};").format(
            sql.Identifier(name),
            sql.SQL(", ").join(sql.Identifier(t.schema, t.table) for t in existing),
        )
        statement = create.as_string(catalog.conn)
        if on_standby:
            detail = "does not exist, and a standby cannot create it (read-only)"
            return [failed(label, detail, f"run on the primary: {statement}")]
        if superuser or (may_create_in_db and all(t.owned for t in existing)):
            return [passed(label, f"does not exist yet: cdc run creates it ({statement})")]
        why = f"does not exist, and role {role} may not create it (it needs CREATE on the database"
        return [failed(label, f"{why} and to own the tables)", f"a DBA must run: {statement}")]
    state = _publication_state(catalog, name)
    return [state, *_publication_tables(catalog, name, existing, published, superuser, on_standby)]


def _publication_state(catalog: Catalog, name: str) -> Check:
    label = f"publication {name}"
    flags = catalog.rows(_PUBLICATION, (name,))[0]
    ops = dict(zip(("insert", "update", "delete", "truncate"), flags, strict=True))
    missing = [op for op, on in ops.items() if not on]
    if not missing:
        return passed(label, "exists, publishes insert, update, delete, truncate")
    fix = sql.SQL("ALTER PUBLICATION {} SET (publish = {});").format(
        sql.Identifier(name), sql.Literal("insert, update, delete, truncate")
    )
    detail = f"does not publish {', '.join(missing)}: those changes never reach the pipeline"
    return failed(label, detail, f"run: {fix.as_string(catalog.conn)}")


def _publication_tables(
    catalog: Catalog,
    name: str,
    tables: Sequence[TableFacts],
    published: set[tuple[str, str]],
    superuser: bool,
    on_standby: bool = False,
) -> list[Check]:
    label = f"publication {name}: tables"
    absent = [t for t in tables if (t.schema, t.table) not in published]
    if not absent:
        return [passed(label, f"holds every table of source.tables ({len(tables)})")]
    names = ", ".join(t.name for t in absent)
    if not on_standby and (superuser or all(t.owned for t in absent)):
        return [passed(label, f"lacks {names}: cdc run adds them")]
    add = sql.SQL(" ").join(
        sql.SQL("ALTER PUBLICATION {} ADD TABLE {};").format(
            sql.Identifier(name), sql.Identifier(t.schema, t.table)
        )
        for t in absent
    )
    if on_standby:
        detail = f"lacks {names}, and a standby cannot add them (read-only)"
        return [failed(label, detail, f"run on the primary: {add.as_string(catalog.conn)}")]
    detail = f"lacks {names}, and the role does not own them to add them"
    return [failed(label, detail, f"a DBA must run: {add.as_string(catalog.conn)}")]
