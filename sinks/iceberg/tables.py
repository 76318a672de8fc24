"""The sink's Iceberg tables: made and evolved from the published schemas, and the state each
commit leaves in its snapshot summary (the consumed offsets, a truncate's position).

Every commit of the sink carries, in its snapshot summary, ``cdc.offsets`` (the next offset of
each partition of the table's topic, :func:`sinks.offsets.encode_offsets`) and, once the table
was truncated, ``cdc.truncated`` (the truncate's source position). A reset table is created
again with ``cdc.offsets`` as a table property (no snapshot yet): the offsets read back are the
current snapshot's, else that property's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from cdc.contracts.errors import SinkFatal
from cdc.contracts.schema import TableSchema
from cdc.log.base import TopicPartition
from sinks.iceberg.types import iceberg_type
from sinks.offsets import decode_offsets, encode_offsets

OFFSETS: Final = "cdc.offsets"
TRUNCATED: Final = "cdc.truncated"
NO_RETRIES: Final = "commit.retry.num-retries"
POS, SEQ, DELETED = "_cdc_pos", "_cdc_seq", "_cdc_deleted"
OP, COMMITTED = "_cdc_op", "_cdc_commit_ts"
#: The source column's id (PostgreSQL's attnum) and the names it had before are kept in the
#: field's doc (``cdc:id=3 was=name,title``): renames follow the id, and records written before
#: a rename (in flight, or replayed) are read under the new name.
_ID_DOC: Final = "cdc:id="
_WAS: Final = " was="
_HIDDEN: Final[dict[str, tuple[tuple[str, IcebergType], ...]]] = {
    "current": ((POS, LongType()), (SEQ, LongType()), (DELETED, BooleanType())),
    "append": (
        (OP, StringType()),
        (POS, LongType()),
        (SEQ, LongType()),
        (COMMITTED, TimestamptzType()),
    ),
}
_WIDER: Final = {(IntegerType(), LongType()), (FloatType(), DoubleType())}


def identifier(namespace: str, table: tuple[str, str]) -> tuple[str, str]:
    """The Iceberg table of source table ``(schema, table)``: ``<namespace>.<schema>_<table>``
    (``public`` tables keep their bare name)."""
    schema, name = table
    return namespace, name if schema == "public" else f"{schema}_{name}"


def load(catalog: Catalog, name: tuple[str, str]) -> Table | None:
    try:
        return catalog.load_table(name)
    except NoSuchTableError:
        return None


def create(
    catalog: Catalog,
    name: tuple[str, str],
    published: TableSchema,
    mode: str,
    offsets: Mapping[TopicPartition, int] | None = None,
) -> Table:
    """The table for ``published`` (keys required and the identifier in ``current`` mode)."""
    if not published.key_columns:
        raise SinkFatal(f"{published.schema}.{published.table} has no key: the sink needs one")
    ids = iter(range(1, 10_000))
    fields = [
        NestedField(
            next(ids),
            c.name,
            iceberg_type(c.type, 5000 + i),
            c.key and mode == "current",
            doc=_doc(c.id),
        )
        for i, c in enumerate(published.columns)
    ]
    fields += [NestedField(next(ids), n, t, required=False) for n, t in _HIDDEN[mode]]
    keys = [f.field_id for f in fields if f.name in published.key_columns]
    schema = Schema(*fields, identifier_field_ids=keys if mode == "current" else [])
    properties = {
        OFFSETS: orjson.dumps(encode_offsets(offsets or {})).decode(),
        # pyiceberg would retry a commit that lost a race on the new metadata, with the
        # offsets and the position guards' answers of the old one: the sink retries instead,
        # from a fresh read of the table.
        NO_RETRIES: "0",
    }
    return catalog.create_table(name, schema, properties=properties)


def state(table: Table) -> tuple[dict[TopicPartition, int], tuple[int, int] | None]:
    """The offsets and the truncate position the table's last commit stored."""
    snapshot = table.current_snapshot()
    stored: dict[str, Any] = dict(table.properties)
    if snapshot is not None and snapshot.summary is not None:
        stored = snapshot.summary.additional_properties
    offsets = decode_offsets(orjson.loads(stored.get(OFFSETS) or "{}"))
    truncated = stored.get(TRUNCATED)
    if not truncated:
        return offsets, None
    position, sequence = orjson.loads(truncated)
    return offsets, (int(position), int(sequence))


def summary(
    offsets: Mapping[TopicPartition, int], truncated: tuple[int, int] | None
) -> dict[str, str]:
    """The snapshot properties of a commit leaving ``offsets`` and ``truncated``."""
    out = {OFFSETS: orjson.dumps(encode_offsets(offsets)).decode()}
    if truncated is not None:
        out[TRUNCATED] = orjson.dumps(list(truncated)).decode()
    return out


def evolve(table: Table, published: TableSchema, where: str) -> Table:
    """``table`` as ``published`` wants it: columns added, renamed (by source id), widened.

    Raises:
        SinkFatal: a change Iceberg cannot make (a narrowed type, another type, a new key).
    """
    schema = table.schema()
    by_id = {_source_id(f.doc): f for f in schema.fields if _source_id(f.doc) is not None}
    names = {f.name for f in schema.fields}
    if _keys_after(schema, published) != sorted(published.key_columns):
        raise _refused(where, f"the key became {published.key_columns}")
    with table.update_schema() as update:
        for column in published.columns:
            wanted = iceberg_type(column.type, 0)
            held = schema.find_field(column.name) if column.name in names else None
            if held is None and column.id is not None and column.id in by_id:
                held = by_id[column.id]
                update.rename_column(held.name, column.name)
                former = [*former_names(held.doc), held.name]
                update.update_column(held.name, doc=_doc(column.id, former))
            if held is None:
                update.add_column(column.name, wanted, doc=_doc(column.id))
            elif held.field_type != wanted and not _same_list(held.field_type, wanted):
                if not _widens(held.field_type, wanted):
                    raise _refused(where, f"{column.name} changed {held.field_type} -> {wanted}")
                update.update_column(held.name, wanted)
    return table


def _keys_after(schema: Schema, published: TableSchema) -> list[str]:
    """The table's key columns under the names ``published`` gives them (a key column
    renamed at the source keeps its id); append mode has none, so any key passes."""
    ids: dict[int | None, str] = {c.id: c.name for c in published.columns if c.id is not None}
    keys = [schema.find_field(i) for i in schema.identifier_field_ids]
    if not keys:
        return sorted(published.key_columns)
    return sorted(ids.get(_source_id(f.doc), f.name) for f in keys)


def _same_list(held: IcebergType, wanted: IcebergType) -> bool:
    held_element = getattr(held, "element_type", None)
    return held_element is not None and held_element == getattr(wanted, "element_type", None)


def _widens(held: IcebergType, wanted: IcebergType) -> bool:
    if (held, wanted) in _WIDER:
        return True
    return (
        isinstance(held, DecimalType)
        and isinstance(wanted, DecimalType)
        and held.scale == wanted.scale
        and wanted.precision > held.precision
    )


def _doc(column_id: int | None, former: list[str] | None = None) -> str | None:
    if column_id is None:
        return None
    return f"{_ID_DOC}{column_id}" + (f"{_WAS}{','.join(former)}" if former else "")


def _source_id(doc: str | None) -> int | None:
    if doc is None or not doc.startswith(_ID_DOC):
        return None
    return int(doc[len(_ID_DOC) :].partition(_WAS)[0])


def former_names(doc: str | None) -> list[str]:
    """The names a column had before its renames, oldest first."""
    if doc is None or not doc.startswith(_ID_DOC) or _WAS not in doc:
        return []
    return doc.partition(_WAS)[2].split(",")


def _refused(where: str, what: str) -> SinkFatal:
    return SinkFatal(
        f"{where}: {what}, which Iceberg schema evolution cannot apply; rebuild the table with "
        "cdc sink FILE SINK --reset-table SCHEMA.TABLE"
    )
