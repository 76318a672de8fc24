"""What the source knows about each relation: its shape, its key, its converter, its schema.

Built from pgoutput ``Relation`` messages, which the server sends before a relation's first
change in a session and again after its shape changes (``ALTER TABLE`` mid-stream).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cdc.contracts.errors import SourceFatal
from cdc.contracts.events import topic_name
from cdc.contracts.schema import Column, TableSchema
from cdc.transforms.masks import MASKED_TYPE, Mask
from connectors.postgres.catalog import TableInfo
from connectors.postgres.pgoutput import Relation, TupleData
from connectors.postgres.publication.filters import PLAIN, TableFilter
from connectors.postgres.types import TypeRegistry, row_converter, type_name
from connectors.postgres.types.encoder import RowEncoder
from connectors.postgres.types.row_encoder import row_encoder

CONNECTOR = "postgresql"


@dataclass(frozen=True, slots=True)
class RelationState:
    """One captured relation as of its latest ``Relation`` message.

    Attributes:
        relation: the relation as captured: without the columns its filter leaves out.
        key: record-key columns in key order.
        key_index: their positions in a tuple.
        convert: tuple -> row dict (``UNCHANGED`` passes through).
        index: column name -> position in a tuple.
        encoder: the row encoder (:mod:`connectors.postgres.types.row_encoder` chose its
            implementation).
        registry: the types its columns were described with (their Connect schemas too).
        masks: the masked columns' masks, by name (:mod:`cdc.transforms.masks`).
        project: where the server sends columns the filter leaves out (PostgreSQL 14, or a
            table whose replica identity needs them), the positions of the captured ones in
            the server's tuples: :meth:`captured` keeps only those; ``None``: every column.
    """

    relation: Relation
    info: TableInfo
    topic: str
    key: tuple[str, ...]
    key_index: tuple[int, ...]
    convert: Callable[[TupleData], dict[str, Any]]
    index: Mapping[str, int]
    table_schema: TableSchema
    encoder: RowEncoder
    registry: TypeRegistry
    masks: Mapping[str, Mask] = field(default_factory=dict)
    project: tuple[int, ...] | None = None

    def captured(self, values: TupleData) -> TupleData:
        """A tuple as the server sent it, without the columns the filter leaves out."""
        project = self.project
        return values if project is None else tuple([values[i] for i in project])

    @property
    def schema(self) -> str:
        """The table's schema."""
        return self.info.schema

    @property
    def table(self) -> str:
        """The table's name."""
        return self.info.table

    def key_text(self, values: TupleData) -> dict[str, str | None]:
        """The key's values in text form from a raw tuple (for a fallback read)."""
        names = self.key
        return {
            name: (v if isinstance(v, str) else None)
            for name, v in zip(names, (values[i] for i in self.key_index), strict=True)
        }


def check_keyable(info: TableInfo, configured: Sequence[str] | None) -> None:
    """Fail at start for a table whose changes could not be keyed.

    Raises:
        SourceFatal: no primary key, no usable replica identity and no configured key columns.
    """
    if configured or info.primary_key or info.replica_identity in ("f", "i"):
        return
    raise SourceFatal(
        f"table {info.name} has no primary key: add one, set REPLICA IDENTITY FULL, or name "
        f"its key columns in source.key_columns[{info.name!r}]"
    )


def resolve_key(
    info: TableInfo, relation: Relation, configured: Sequence[str] | None
) -> tuple[str, ...]:
    """The record key of a relation: configured columns, else the primary key, else the
    replica identity index, else (``REPLICA IDENTITY FULL``) every column.

    Raises:
        SourceFatal: configured key columns the table does not have, or no key at all.
    """
    names = [c.name for c in relation.columns]
    if configured:
        absent = [c for c in configured if c not in names]
        if absent:
            raise SourceFatal(f"key_columns of {info.name} names missing columns {absent}")
        return tuple(configured)
    flagged = [c.name for c in relation.columns if c.is_key]
    pk_present = bool(info.primary_key) and all(c in names for c in info.primary_key)
    if pk_present and (relation.replica_identity != "i" or set(flagged) == set(info.primary_key)):
        return info.primary_key
    if relation.replica_identity in ("d", "i") and flagged:
        return tuple(flagged)
    if relation.replica_identity == "f":
        return tuple(names)
    check_keyable(info, configured)
    raise SourceFatal(f"table {info.name} has no key columns in its replica identity")


def build_state(
    pipeline: str,
    info: TableInfo,
    relation: Relation,
    registry: TypeRegistry,
    configured_key: Sequence[str] | None,
    not_null: set[str],
    position: int,
    array_dims: Mapping[str, int] | None = None,
    ids: Sequence[int | None] | None = None,
    table_filter: TableFilter = PLAIN,
) -> RelationState:
    """The relation's state after a ``Relation`` message (types must already be loaded).

    ``array_dims`` gives the declared dimensions of multi-dimensional array columns, published
    as ``integer[][]`` so sinks with fixed nesting can type them. ``ids`` gives each column's
    ``attnum`` (:attr:`cdc.contracts.schema.Column.id`), where known. ``table_filter`` leaves
    columns out (those the server still sends, :attr:`RelationState.project`) and masks others.

    Raises:
        SourceFatal: no key, or the filter leaves out or masks a key column (other than by
            hash).
    """
    key = resolve_key(info, relation, configured_key)
    table_filter.check_key(key)
    # By attnum where the filter is bound: a renamed column keeps its mask or exclusion.
    resolved = table_filter.resolve([c.name for c in relation.columns], ids or (), key)
    relation, ids, project = _captured(relation, ids or (), resolved.kept)
    index = {c.name: i for i, c in enumerate(relation.columns)}
    masks = dict(resolved.masks)
    columns = _schema_columns(relation, registry, key, not_null, array_dims or {}, ids, masks)
    key_index = tuple(index[k] for k in key)
    convert = row_converter(relation.columns, registry, masks)
    return RelationState(
        relation=relation,
        info=info,
        topic=topic_name(pipeline, info.schema, info.table),
        key=key,
        key_index=key_index,
        convert=convert,
        index=index,
        table_schema=TableSchema(CONNECTOR, info.schema, info.table, columns, position),
        encoder=row_encoder(relation.columns, registry, key_index, convert, masks),
        registry=registry,
        masks=masks,
        project=project,
    )


def _captured(
    relation: Relation, ids: Sequence[int | None], kept: Sequence[int]
) -> tuple[Relation, Sequence[int | None], tuple[int, ...] | None]:
    """The relation with only the columns at ``kept``, their ids, and those positions
    (``None`` when it keeps them all)."""
    if len(kept) == len(relation.columns):
        return relation, ids, None
    columns = tuple(relation.columns[i] for i in kept)
    known = [ids[i] for i in kept if i < len(ids)]
    return replace(relation, columns=columns), known, tuple(kept)


def _schema_columns(
    relation: Relation,
    registry: TypeRegistry,
    key: Sequence[str],
    not_null: set[str],
    dims: Mapping[str, int],
    ids: Sequence[int | None],
    masks: Mapping[str, Mask],
) -> tuple[Column, ...]:
    """The published columns of a relation (see :func:`build_state`); a masked column is
    published as what its mask writes (:data:`cdc.transforms.masks.MASKED_TYPE`)."""
    known = list(ids)
    columns = []
    for n, c in enumerate(relation.columns):
        mask = masks.get(c.name)
        if mask is None:
            kind = type_name(c.type_oid, c.type_modifier, registry)
            kind += "[]" * max(0, dims.get(c.name, 1) - 1)
        else:
            kind = MASKED_TYPE
        columns.append(
            Column(
                name=c.name,
                type=kind,
                key=c.name in key,
                nullable=c.name not in not_null or (mask is not None and mask.nullable),
                id=known[n] if n < len(known) else None,
            )
        )
    return tuple(columns)
