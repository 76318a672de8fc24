"""The pipeline's publication: which tables it holds, with which options, and the DDL that makes
it so (created when missing, tables and options added when lacking, tables dropped on request).

Partitioned tables publish through their root (``publish_via_partition_root = true``): pgoutput
then describes every partition's change as the root's, so it lands on the root's topic under
the root's key, partitions attached later included. Membership is read from
``pg_publication_rel`` (and, for ``FOR ALL TABLES`` and ``FOR TABLES IN SCHEMA``, from the
publication itself), not from ``pg_publication_tables``: that view lists the leaf partitions
of a partitioned table unless the publication publishes via the root, so a root added before
looked absent, and adding it again failed ("already member of publication").

Generated columns: pgoutput publishes stored ones from PostgreSQL 18, when the publication says
``publish_generated_columns = stored``; virtual ones (18) never. See
:func:`connectors.postgres.catalog.published_column` for how the snapshot follows suit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from cdc.contracts.errors import SourceFatal, SourceMisconfigured
from cdc.support.logging import Logger
from connectors.postgres.catalog import PUBLISHES_GENERATED_MIN_VERSION, Catalog, Query, TableInfo
from connectors.postgres.replication.standby import read_only_problem

#: Row filters and column lists on a publication's tables.
ROW_FILTER_MIN_VERSION = 150000
_SCHEMA_PUBLICATION_MIN_VERSION = 150000
_VIA_ROOT = "publish_via_partition_root"

_EXISTS = sql.SQL("SELECT 1 FROM pg_publication WHERE pubname = %s")

# A table is a member when it, or a partitioned table it is a partition of, is in the
# publication, or the publication takes all tables (or, 15+, its schema's or its root's).
_MEMBERS = sql.SQL(
    "SELECT n.nspname::text, c.relname::text FROM pg_publication p CROSS JOIN pg_class c"
    " JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE p.pubname = %s AND c.relkind IN ('r', 'p')"
    " AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'"
    " AND (p.puballtables OR EXISTS (SELECT 1 FROM pg_publication_rel r"
    "  WHERE r.prpubid = p.oid AND (r.prrelid = c.oid OR (c.relispartition AND r.prrelid IN"
    "  (SELECT relid FROM pg_partition_ancestors(c.oid))))){}"
    ")"
)
_IN_SCHEMA = sql.SQL(
    " OR EXISTS (SELECT 1 FROM pg_publication_namespace s WHERE s.pnpubid = p.oid"
    " AND s.pnnspid IN (SELECT a.relnamespace FROM pg_class a WHERE a.oid = c.oid"
    " OR (c.relispartition AND a.oid IN (SELECT relid FROM pg_partition_ancestors(c.oid)))))"
)


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A table as a publication holds it: all its columns and rows, or (PostgreSQL 15+) only
    ``columns`` and only the rows ``where`` accepts.

    Internal for now: the filters issue (#17) builds these from its configuration, and
    validates ``where`` there (it reaches the server as SQL, see :func:`table_clause`).
    """

    schema: str
    table: str
    columns: tuple[str, ...] | None = None
    where: str | None = None

    @property
    def name(self) -> str:
        """``schema.table``."""
        return f"{self.schema}.{self.table}"

    @property
    def filtered(self) -> bool:
        """It has a column list or a row filter."""
        return self.columns is not None or self.where is not None


def table_clause(spec: TableSpec) -> sql.Composed:
    """``"s"."t" ("a", "b") WHERE (<where>)``: one table of ``FOR TABLE`` / ``SET TABLE``.

    Raises:
        ValueError: an empty column list (the server's grammar has none).
    """
    parts: list[sql.Composable] = [sql.Identifier(spec.schema, spec.table)]
    if spec.columns is not None:
        if not spec.columns:
            raise ValueError(f"the column list of {spec.name} is empty")
        parts.append(sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Identifier, spec.columns))))
    if spec.where is not None:
        # A row filter is an SQL expression by design, so it cannot be composed from
        # identifiers and literals: it goes in as sql.SQL on purpose. It comes from the
        # operator's configuration (trusted, as `cdc snapshot --where` is), never from data, and
        # the server accepts only a plain expression there (no subquery, no user function).
        parts.append(sql.SQL("WHERE ({})").format(sql.SQL(spec.where)))
    return sql.SQL(" ").join(parts)


def check_specs(specs: Sequence[TableSpec], version: int) -> None:
    """Raises SourceFatal: a row filter or column list on a server older than 15."""
    filtered = [s.name for s in specs if s.filtered]
    if filtered and version < ROW_FILTER_MIN_VERSION:
        raise SourceFatal(
            f"publication row filters and column lists need PostgreSQL 15 or later; the server "
            f"runs {version // 10000} (tables {', '.join(filtered)})"
        )


def options_wanted(tables: Sequence[TableInfo], version: int) -> dict[str, str]:
    """The publication options the captured ``tables`` need on ``version``."""
    options = {}
    if any(t.partitioned for t in tables):
        options[_VIA_ROOT] = "true"
    if version >= PUBLISHES_GENERATED_MIN_VERSION and any(t.generated_of("s") for t in tables):
        options["publish_generated_columns"] = "stored"
    return options


def with_options(options: Mapping[str, str]) -> sql.Composable:
    """`` WITH (name = 'value', ...)``, or nothing. The names are this module's constants."""
    if not options:
        return sql.SQL("")
    return sql.SQL(" WITH ({})").format(_pairs(options))


def create_statement(
    name: str, specs: Sequence[TableSpec], options: Mapping[str, str]
) -> sql.Composed:
    """``CREATE PUBLICATION name FOR TABLE ... [WITH (...)]``."""
    return sql.SQL("CREATE PUBLICATION {} FOR TABLE {}{}").format(
        sql.Identifier(name), sql.SQL(", ").join(map(table_clause, specs)), with_options(options)
    )


def set_tables_statement(name: str, specs: Sequence[TableSpec]) -> sql.Composed:
    """``ALTER PUBLICATION name SET TABLE ...``: the publication holds exactly ``specs``."""
    return sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(
        sql.Identifier(name), sql.SQL(", ").join(map(table_clause, specs))
    )


def publication_tables(catalog: Catalog, name: str) -> set[tuple[str, str]] | None:
    """``(schema, table)`` of every table publication ``name`` publishes changes of (a
    partitioned table, and each of its partitions, when it or an ancestor is in it);
    ``None`` when the publication is missing."""
    if not catalog.rows(_EXISTS, (name,)):
        return None
    in_schema = catalog.server_version >= _SCHEMA_PUBLICATION_MIN_VERSION
    query = _MEMBERS.format(_IN_SCHEMA if in_schema else sql.SQL(""))
    return {(s, t) for s, t in catalog.rows(query, (name,))}


def check_partitions(tables: Sequence[TableInfo]) -> None:
    """Raises SourceFatal: a partition named in ``source.tables`` alongside a partitioned
    table it belongs to (its changes reach the root's topic already)."""
    names = {t.name for t in tables}
    for table in tables:
        root = next((a for a in table.ancestors if a in names), None)
        if root is not None:
            raise SourceFatal(
                f"source.tables names {table.name} and {root}, a partitioned table it is a "
                f"partition of: the changes of every partition are captured on {root}'s topic "
                f"(publish_via_partition_root); remove {table.name} from source.tables"
            )


def warn_unpublished_generated(tables: Sequence[TableInfo], version: int, logger: Logger) -> None:
    """Name the generated columns pgoutput does not publish on ``version``: they are in no
    record, streamed or snapshotted (a sink can compute them from the other columns)."""
    for table in tables:
        virtual = list(table.generated_of("v"))
        stored = [] if version >= PUBLISHES_GENERATED_MIN_VERSION else list(table.generated_of("s"))
        if virtual:
            logger.warning(
                "source.generated_columns_not_captured",
                table=table.name,
                columns=virtual,
                reason="PostgreSQL cannot publish virtual generated columns",
            )
        if stored:
            logger.warning(
                "source.generated_columns_not_captured",
                table=table.name,
                columns=stored,
                reason="pgoutput publishes stored generated columns from PostgreSQL 18",
            )


def ensure_publication(
    catalog: Catalog,
    name: str,
    tables: Sequence[TableInfo],
    role: str,
    logger: Logger,
    specs: Mapping[str, TableSpec] | None = None,
) -> None:
    """Create publication ``name`` for ``tables``, or add the tables and options it lacks.

    Args:
        specs: column lists and row filters by ``schema.table`` (PostgreSQL 15+), for a table
            the publication is created with or adds; a table it holds already keeps what it
            has (:func:`set_publication_tables` replaces that).

    Raises:
        SourceFatal: a partition named with its root; a filter the server cannot apply; the
            role may not create or alter the publication (the message gives the DBA's
            statement).
    """
    check_partitions(tables)
    version = catalog.server_version
    warn_unpublished_generated(tables, version, logger)
    chosen = [(specs or {}).get(t.name) or TableSpec(t.schema, t.table) for t in tables]
    check_specs(chosen, version)
    options = options_wanted(tables, version)
    published = publication_tables(catalog, name)
    if published is None:
        statement = create_statement(name, chosen, options)
        run_ddl(catalog, statement, f"role {role!r} may not create publication {name!r}")
        logger.info("publication.created", publication=name, tables=[t.name for t in tables])
        return
    via_root = _ensure_options(catalog, name, options, role, logger)
    if via_root:
        check_leaves(tables, published, name)
    _add_missing(catalog, name, [s for s in chosen if (s.schema, s.table) not in published], role)
    for spec in chosen:
        if (spec.schema, spec.table) not in published:
            logger.info("publication.table_added", publication=name, table=spec.name)


def _add_missing(catalog: Catalog, name: str, missing: Sequence[TableSpec], role: str) -> None:
    for spec in missing:
        statement = sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
            sql.Identifier(name), table_clause(spec)
        )
        problem = (
            f"table {spec.name} is not in publication {name!r} and role {role!r} may not add it"
        )
        run_ddl(catalog, statement, problem)


def _current_options(catalog: Catalog, name: str) -> dict[str, str]:
    generated = sql.SQL(
        "CASE pubgencols WHEN 's' THEN 'stored' ELSE 'none' END"
        if catalog.server_version >= PUBLISHES_GENERATED_MIN_VERSION
        else "'none'"
    )
    query = sql.SQL(
        "SELECT CASE WHEN pubviaroot THEN 'true' ELSE 'false' END, {}"
        " FROM pg_publication WHERE pubname = %s"
    ).format(generated)
    [(via_root, stored)] = catalog.rows(query, (name,))
    return {_VIA_ROOT: via_root, "publish_generated_columns": stored}


def check_leaves(
    tables: Sequence[TableInfo], published: set[tuple[str, str]], publication: str
) -> None:
    """Raises SourceFatal: a captured partition whose ancestor the publication holds, while it
    publishes through the root: the partition's changes arrive as the ancestor's, which is not
    captured, so they would be skipped without a word."""
    for table in tables:
        held = [a for a in table.ancestors if tuple(a.split(".", 1)) in published]
        if held:
            raise SourceFatal(
                f"source.tables names {table.name}, a partition of {held[-1]}, which publication "
                f"{publication!r} publishes with publish_via_partition_root: its changes arrive "
                f"as {held[-1]}'s; capture {held[-1]} instead"
            )


def _ensure_options(
    catalog: Catalog, name: str, wanted: Mapping[str, str], role: str, logger: Logger
) -> bool:
    """``ALTER PUBLICATION name SET (...)`` for the wanted options it lacks (it must be ours,
    or a DBA must run it: the error says so); returns whether it publishes through roots."""
    current = _current_options(catalog, name)
    lacking = {k: v for k, v in wanted.items() if current.get(k) != v}
    via_root = "true" in (current["publish_via_partition_root"], wanted.get(_VIA_ROOT))
    if not lacking:
        return via_root
    statement = sql.SQL("ALTER PUBLICATION {} SET ({})").format(
        sql.Identifier(name), _pairs(lacking)
    )
    problem = f"publication {name!r} lacks {_pairs_text(lacking)} and role {role!r} may not set it"
    run_ddl(catalog, statement, problem)
    logger.info("publication.options_set", publication=name, options=lacking)
    return via_root


def _pairs(options: Mapping[str, str]) -> sql.Composed:
    return sql.SQL(", ").join(
        sql.SQL("{} = {}").format(sql.SQL(k), sql.Literal(v)) for k, v in options.items()
    )


def _pairs_text(options: Mapping[str, str]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in options.items())


def set_publication_tables(
    catalog: Catalog, name: str, specs: Sequence[TableSpec], role: str, logger: Logger
) -> None:
    """Make publication ``name`` hold exactly ``specs``, with their column lists and row
    filters (``ALTER PUBLICATION ... SET TABLE``).

    Raises:
        SourceFatal: a filter below PostgreSQL 15; the role may not alter the publication.
    """
    check_specs(specs, catalog.server_version)
    statement = set_tables_statement(name, specs)
    run_ddl(catalog, statement, f"role {role!r} may not alter publication {name!r}")
    logger.info("publication.tables_set", publication=name, tables=[s.name for s in specs])


def drop_from_publication(
    catalog: Catalog, name: str, tables: Sequence[tuple[str, str]], logger: Logger
) -> None:
    """Take ``tables`` (no longer captured) out of publication ``name``, so the server stops
    decoding their changes for this slot.

    Not fatal when it cannot be done (no privilege, a ``FOR ALL TABLES`` publication): the
    source skips the changes of a table it does not capture, so capture stops either way; the
    warning gives the DBA's statement.
    """
    published = publication_tables(catalog, name) or set()
    for schema, table in tables:
        if (schema, table) not in published:
            continue  # dropped from the database, or never added
        statement = sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(
            sql.Identifier(name), sql.Identifier(schema, table)
        )
        try:
            run_ddl(catalog, statement, f"cannot take {schema}.{table} out of {name!r}")
        except SourceFatal as exc:
            logger.warning(
                "publication.table_kept",
                publication=name,
                table=f"{schema}.{table}",
                reason=str(exc),
            )
            continue
        logger.info("publication.table_dropped", publication=name, table=f"{schema}.{table}")


def run_ddl(catalog: Catalog, statement: Query, problem: str) -> None:
    """Run DDL; a missing privilege or a refused state becomes ``SourceFatal``."""
    try:
        catalog.run(statement)
    except psycopg.errors.InsufficientPrivilege as exc:
        text = statement.as_string(catalog.conn)
        reason = exc.diag.message_primary
        raise SourceFatal(f"{problem} ({reason}); a DBA must run: {text};") from exc
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:
        raise SourceFatal(f"{problem}: {exc.diag.message_primary}") from exc
    except psycopg.errors.ReadOnlySqlTransaction as exc:  # a hot standby: the primary's job
        raise SourceFatal(
            read_only_problem(f"cannot run {statement.as_string(catalog.conn)}")
        ) from exc
    except (psycopg.ProgrammingError, psycopg.NotSupportedError, psycopg.DataError) as exc:
        # A column list or row filter the server refuses (an unknown column, a bad expression).
        text = statement.as_string(catalog.conn)
        detail = f" ({exc.diag.message_detail})" if exc.diag.message_detail else ""
        raise SourceMisconfigured(
            f"the server refused {text}: {exc.diag.message_primary}{detail} (source.tables: a "
            "row filter is a plain expression over the table's own columns, with immutable "
            "functions only)"
        ) from exc
