"""``cdc verify``'s source side under the pipeline's filters and transforms: which output
tables can be compared, and the source's rows of one as the sinks got them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from cdc.contracts.events import ChangeEvent, Op, SourceInfo

RowReader = Callable[[], Iterable[tuple[dict[str, Any], dict[str, Any]]]]


#: The operations whose changes make a table's rows: a table that leaves one out holds, in
#: its sinks, rows the source no longer has (or lacks rows it has), on purpose.
_ROW_OPS = frozenset("cudr")


def unverifiable(pipeline: Any, table: str) -> str | None:
    """Why the sinks' copy of output table ``table`` cannot equal the source's rows, if so."""
    transforms = pipeline.chain().unverifiable()
    if transforms:
        return (
            f"{', '.join(transforms)} cannot be applied to the rows as they are now (its values "
            "depend on the change that wrote each row): not compared"
        )
    for source_table in pipeline.routed_from(table):
        ops = pipeline.source.table_entry(source_table).ops
        if ops is not None and not set(ops) >= _ROW_OPS:
            left_out = "".join(sorted(_ROW_OPS - set(ops)))
            return (
                f"the ops of {source_table} leave out {', '.join(left_out)}: its sinks are "
                "not meant to hold the source's rows; not compared"
            )
    return None


def source_reader(pipeline: Any, read_rows: Any, table: str) -> RowReader:
    """The source's rows of output table ``table`` (``schema.table``), as the sinks got them:
    each source table routed to it read through the source's filters, and each row, as an
    ``r`` event, through the pipeline's transforms."""
    chain = pipeline.chain()
    sources = pipeline.routed_from(table)
    envelope = pipeline.envelope
    if not chain:
        schema, _, name = table.partition(".")
        return lambda: read_rows(pipeline.source, schema, name, envelope=envelope)

    def read() -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
        for source_table in sources:
            schema, _, name = source_table.partition(".")
            for key, row in read_rows(pipeline.source, schema, name, envelope=envelope):
                for event in chain.apply(_read_event(pipeline.name, schema, name, key, row)):
                    if f"{event.topic_table[0]}.{event.topic_table[1]}" == table and event.after:
                        yield dict(event.key), dict(event.after)

    return read


def _read_event(
    pipeline: str, schema: str, table: str, key: dict[str, Any], row: dict[str, Any]
) -> ChangeEvent:
    """A source row as the ``r`` event a snapshot reads it as (its position unknown: 0)."""
    # A connector of no source: its rows are plain mappings, edited as such by the transforms.
    source = SourceInfo(VERIFY_CONNECTOR, "", schema, table, 0, 0)
    return ChangeEvent(Op.READ, dict(key), None, dict(row), source)


#: The connector name of the events ``cdc verify`` makes of the source's rows.
VERIFY_CONNECTOR = "cdc-verify"
