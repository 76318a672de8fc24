"""Follow each captured table's shape through the stream; ask for a re-snapshot when DDL changed
rows that PostgreSQL did not log (the rules and their limits:
:mod:`connectors.postgres.assembly.evolution`).

The previous shape of a table is the one this session saw last, else the one the pipeline
published last (read from the schema topic at ``open``), so a change made while the pipeline
was stopped is caught at the first ``Relation`` message of the next session too. A table
never published (no row of it in the log yet) has no previous shape: its first ``Relation`` is
taken as it is, and no sink holds a row of it that could be stale.

Detection needs that ``Relation`` message, which pgoutput sends only before the table's next
change: DDL followed by no change of the table is not seen until one comes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from psycopg import sql

from cdc.contracts.errors import LogError
from cdc.contracts.schema import TableSchema
from cdc.log.base import Log
from cdc.runtime.schemas import SchemaCatalog
from cdc.support.logging import Logger
from connectors.postgres.assembly.evolution import Attribute, column_ids, diff, resnapshot_reasons
from connectors.postgres.catalog import Catalog
from connectors.postgres.pgoutput import Relation

#: Called as ``resnapshot(table, reason)`` (``table`` is ``schema.table``) when a schema change
#: left the rows already streamed stale; the snapshot layer queues the table.
Resnapshot = Callable[[str, str], None]

_ATTRIBUTES = sql.SQL(
    "SELECT attnum::int, attname::text, attisdropped, atthasdef, atthasmissing,"
    " attidentity <> '', attgenerated <> ''"
    " FROM pg_attribute WHERE attrelid = %s AND attnum > 0 ORDER BY attnum"
)


def attributes(catalog: Catalog, oid: int) -> list[Attribute]:
    """Every column of table ``oid`` in the catalog now, dropped ones included."""
    return [
        Attribute(int(n), str(name), bool(d), bool(h), bool(m), bool(i), bool(g))
        for n, name, d, h, m, i, g in catalog.rows(_ATTRIBUTES, (oid,))
    ]


def published_schemas(
    log: Log, pipeline: str, tables: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], TableSchema]:
    """The shapes the pipeline last published for ``tables`` (none on a first start)."""
    catalog = SchemaCatalog(log, pipeline, wait_s=0, source_shapes=True)
    found: dict[tuple[str, str], TableSchema] = {}
    try:
        for schema, table in tables:
            known = catalog.get(schema, table)
            if known is not None:
                found[(schema, table)] = known
    except LogError:
        return {}  # the schema topic does not exist yet
    return found


class ShapeTracker:
    """Each table's latest shape, and the decisions its changes call for.

    Args:
        catalog: the source's catalog connection.
        known: the shapes published before this session.
        logger: bound logger (``schema.changed``).
        resnapshot: the snapshot layer's request, or ``None`` without one.
    """

    def __init__(
        self,
        catalog: Catalog,
        known: Mapping[tuple[str, str], TableSchema],
        logger: Logger,
        resnapshot: Resnapshot | None,
    ) -> None:
        self._catalog, self._logger, self._resnapshot = catalog, logger, resnapshot
        self._shapes = dict(known)
        self._attributes: dict[int, list[Attribute]] = {}

    def ids(self, oid: int, relation: Relation) -> list[int | None]:
        """The ``attnum`` of each column of ``relation`` (see :func:`column_ids`)."""
        found = self._attributes[oid] = attributes(self._catalog, oid)
        previous = self._shapes.get((relation.namespace, relation.name))
        return column_ids([c.name for c in relation.columns], found, previous)

    def observe(self, oid: int, shape: TableSchema) -> None:
        """Take ``shape`` as the table's current one; log a change and act on it."""
        name = (shape.schema, shape.table)
        previous = self._shapes.get(name)
        self._shapes[name] = shape
        if previous is None:
            return
        change = diff(previous, shape)
        if change.empty:
            return
        table = f"{shape.schema}.{shape.table}"
        reasons = resnapshot_reasons(change, self._attributes.pop(oid, []))
        if not reasons:
            self._logger.info(
                "schema.changed",
                table=table,
                change=change.to_json(),
                resnapshot=False,
                reason="rows already streamed keep their values",
            )
            return
        reason = "; ".join(reasons)
        self._logger.warning(
            "schema.changed", table=table, change=change.to_json(), resnapshot=True, reason=reason
        )
        if self._resnapshot is None:
            self._logger.warning(
                "schema.resnapshot_unavailable",
                table=table,
                fix=f"run `cdc snapshot PIPELINE_FILE --table {table}`",
            )
            return
        self._resnapshot(table, reason)
