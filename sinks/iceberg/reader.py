"""Read an Iceberg table back, for ``cdc verify`` and tests: the current rows (``current``
mode: deleted keys left out); and the sink's stored consistent position, for ``cdc status``.
Values are as Iceberg holds them: numbers, ``Decimal``, dates and times, and the text form of
the types stored as text, which verify's canonical form reads as the source's values."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cdc.contracts.errors import SinkFatal
from sinks.iceberg import position, tables
from sinks.iceberg.config import IcebergSinkConfig
from sinks.iceberg.sink import open_catalog


def read_rows(
    config: IcebergSinkConfig, schema: str, table: str, *, pipeline: str | None = None
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Yield ``(key, row)`` of every current row of ``schema.table``; nothing if the sink has
    not made the table. ``append`` mode has no current rows: it yields every change row."""
    name = tables.identifier(config.namespace_for(pipeline or ""), (schema, table))
    try:
        found = tables.load(open_catalog(config), name)
    except Exception as exc:  # pyiceberg and SQLAlchemy have no common root
        raise SinkFatal(
            f"Iceberg sink {config.name}: reading back: {config.scrub(str(exc))}"
        ) from None
    if found is None:
        return
    iceberg = found.schema()
    hidden = {f.name for f in iceberg.fields if f.name.startswith("_cdc_")}
    columns = [f.name for f in iceberg.fields if f.name not in hidden]
    keys = [iceberg.find_field(i).name for i in iceberg.identifier_field_ids] or columns[:1]
    current = tables.DELETED in hidden  # current mode: a deleted key is a row of its own
    scan = found.scan(row_filter=f"{tables.DELETED} = false") if current else found.scan()
    for batch in scan.to_arrow_batch_reader():
        for values in batch.to_pylist():
            row = {c: values[c] for c in columns}
            yield {k: row[k] for k in keys}, row


def read_consistent_position(config: IcebergSinkConfig, *, pipeline: str) -> str | None:
    """For ``cdc status``: the position the sink stored in its namespace's properties
    (:mod:`sinks.iceberg.position`); ``None`` when none is.

    Raises:
        SinkFatal: the catalog cannot be read (the message without secrets).
    """
    uri = config.catalog_properties().get("uri", "")
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return None  # the sink never ran: status makes no catalog file
    namespace = config.namespace_for(pipeline)
    try:
        return position.read(open_catalog(config), namespace, position.key(pipeline, config.name))
    except Exception as exc:  # pyiceberg, SQLAlchemy, HTTP: no common root
        raise SinkFatal(
            f"Iceberg sink {config.name}: reading the stored position: {config.scrub(str(exc))}"
        ) from None
