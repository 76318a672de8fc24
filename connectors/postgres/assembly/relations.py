"""The captured relations and their types, as the stream's ``Relation`` and ``Type`` messages
describe them, and the table schemas they publish."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from cdc.contracts.events import topic_name
from cdc.contracts.schema import TableSchema
from cdc.envelope.options import READABLE, EnvelopeOptions
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.batch import Batch
from connectors.postgres.assembly.relation_state import RelationState, build_state
from connectors.postgres.assembly.shapes import ShapeTracker
from connectors.postgres.assembly.toast import ToastFiller
from connectors.postgres.catalog import TableInfo
from connectors.postgres.publication.filters import PLAIN, TableFilter
from connectors.postgres.types import TypeRegistry


class RelationCatalog(Protocol):
    """The catalog lookups a ``Relation`` message needs (part of ``CatalogReader``)."""

    def load_types(self, registry: TypeRegistry, oids: Sequence[int]) -> None:
        """Add the types ``oids`` (and what they build on) to ``registry``."""
        ...

    def not_null(self, oid: int) -> set[str]:
        """The NOT NULL columns of table ``oid``."""
        ...

    def array_dims(self, oid: int) -> dict[str, int]:
        """Declared dimensions of the multi-dimensional array columns of table ``oid``."""
        ...

    def toastable_columns(self, schema: str, table: str) -> list[str]:
        """The columns of the table whose values PostgreSQL can store out of line."""
        ...


class Relations:
    """The state of each captured relation, by OID.

    Args:
        pipeline: pipeline name (topics).
        tables: captured tables by ``(schema, table)``.
        key_columns: configured key columns by ``schema.table``.
        catalog: catalog lookups.
        toast: told which columns of each topic can be TOASTed.
        batch: where a new shape's schema is published.
        options: the pipeline's envelope options (how values are written).
        filters: each table's filters (``schema.table``; absent: captured whole).
        topic_of: ``(schema, table)`` -> the topic its records go to (routed by transforms).
    """

    def __init__(
        self,
        pipeline: str,
        tables: Mapping[tuple[str, str], TableInfo],
        key_columns: Mapping[str, Sequence[str]],
        catalog: RelationCatalog,
        toast: ToastFiller,
        batch: Batch,
        options: EnvelopeOptions = READABLE,
        filters: Mapping[str, TableFilter] | None = None,
        topic_of: Callable[[str, str], str] | None = None,
    ) -> None:
        self._pipeline, self._tables, self._key_columns = pipeline, tables, key_columns
        self._filters = filters or {}
        self._topic_of = topic_of or (lambda schema, table: topic_name(pipeline, schema, table))
        # The TOAST-able columns of each table, by the topic its records go to: two tables
        # routed to one topic are tracked together.
        self._toastable: dict[str, dict[str, list[str]]] = {}
        self._catalog, self._toast, self._batch = catalog, toast, batch
        self.registry = TypeRegistry(options)
        #: Follows shape changes (published column ids, re-snapshots); ``None``: not followed.
        self.shapes: ShapeTracker | None = None
        #: Captured relations by OID (the hot path reads it directly).
        self.by_oid: dict[int, RelationState] = {}
        self._skipped: set[int] = set()  # published relations that are not captured here
        self._published: dict[tuple[str, str], TableSchema] = {}

    def get(self, oid: int) -> RelationState | None:
        """The relation ``oid``, or ``None`` for one that is published but not captured.

        Raises:
            ProtocolError: a change for a relation the stream has not described.
        """
        state = self.by_oid.get(oid)
        if state is None and oid not in self._skipped:
            raise pg.ProtocolError(f"change for relation {oid} before its Relation message")
        return state

    def on_type(self, msg: pg.TypeInfo) -> None:
        """A ``Type`` message: load the type, unless it is known."""
        if msg.oid not in self.registry:
            self._catalog.load_types(self.registry, [msg.oid])

    def on_relation(self, msg: pg.Relation, position: int) -> None:
        """A ``Relation`` message, in the transaction at ``position``."""
        info = self._tables.get((msg.namespace or "pg_catalog", msg.name))
        if info is None:
            self._skipped.add(msg.oid)
            self.by_oid.pop(msg.oid, None)
            return
        missing = self.registry.missing(c.type_oid for c in msg.columns)
        if missing:
            self._catalog.load_types(self.registry, missing)
        state = self._build(info, msg, position)
        self.by_oid[msg.oid] = state
        self._skipped.discard(msg.oid)
        if self.shapes is not None:
            self.shapes.observe(info.oid, state.table_schema)
        self._publish(state.table_schema)
        toastable = self._catalog.toastable_columns(info.schema, info.table)
        topic = self._topic_of(info.schema, info.table)
        tables = self._toastable.setdefault(topic, {})
        tables[info.name] = [c for c in toastable if c in state.index]
        self._toast.track(topic, list(dict.fromkeys(c for cs in tables.values() for c in cs)))

    def _build(self, info: TableInfo, msg: pg.Relation, position: int) -> RelationState:
        shapes = self.shapes
        return build_state(
            self._pipeline,
            info,
            msg,
            self.registry,
            self._key_columns.get(info.name),
            self._catalog.not_null(info.oid),
            position,
            self._catalog.array_dims(info.oid),
            None if shapes is None else shapes.ids(info.oid, msg),
            self._filters.get(info.name, PLAIN),
        )

    def _publish(self, schema: TableSchema) -> None:
        name = (schema.schema, schema.table)
        if schema.same_shape(self._published.get(name)):
            return
        self._published[name] = schema
        self._batch.publish(schema)
