"""``cdc trace``'s source side: the key's current row as the sinks got it (read as ``cdc verify``
reads the source: through the table's columns, masks and row filter, then the transforms,
:func:`cdc.cli.verify.sources.source_reader`), and what of the table's configuration bears on
it: a row filter that leaves the row out, ``ops`` that leave changes out, masked columns."""

from __future__ import annotations

from typing import Any

from cdc.cli.trace_log import key_text
from cdc.cli.verify.sources import source_reader
from cdc.contracts import plugins


def source_side(pipeline: Any, table: str, key: dict[str, Any]) -> dict[str, Any]:
    """``{"readable", "read_by", "row", "exists", "excluded_by", "ops", "masked", "columns"}``.

    ``row`` is the row as the sinks got it (``None``: none); ``exists`` whether the source has
    the key at all, its row filter aside (``None``: not known). Looked up by key where the
    source plugin has ``read_key`` (PostgreSQL), else the table is read whole through
    ``read_rows`` (as ``cdc verify`` reads it) and the key's row picked out.

    Raises:
        CdcError: the source cannot be reached.
    """
    entries = [pipeline.source.table_entry(t) for t in pipeline.routed_from(table)]
    report: dict[str, Any] = {
        "readable": False,
        "read_by": None,
        "row": None,
        "exists": None,
        "excluded_by": None,
        "ops": _ops(entries),
        "masked": source_masked(pipeline, table),
        "columns": _columns(entries),
    }
    if not entries:  # a live join view: no source table of its own
        return report
    plugin = plugins.load(plugins.SOURCE_GROUP, pipeline.source.type)
    looked_up = _looked_up(plugin, pipeline, table, key, report["masked"])
    if looked_up is not None:
        report["readable"], report["read_by"] = True, "key lookup"
        report["row"], report["exists"] = looked_up
        if report["row"] is None and report["exists"]:
            report["excluded_by"] = {"where": [e.where for e in entries if e.where is not None]}
        return report
    read_rows = getattr(plugin, "read_rows", None)
    if read_rows is None:
        return report
    report["readable"], report["read_by"] = True, "table read"
    report["row"] = _find(source_reader(pipeline, read_rows, table), key)
    report["exists"] = report["row"] is not None
    filtered = [e for e in entries if e.where is not None]
    if report["row"] is None and filtered:
        unfiltered = _without_where(pipeline)
        found = _find(source_reader(unfiltered, read_rows, table), key)
        report["exists"] = found is not None
        if found is not None:
            report["excluded_by"] = {"where": [e.where for e in filtered]}
    return report


def _looked_up(
    plugin: Any, pipeline: Any, table: str, key: dict[str, Any], masked: list[str]
) -> tuple[dict[str, Any] | None, bool] | None:
    """``(row, exists)`` through the source's ``read_key`` (a key lookup), where it has one and
    the record key is the table's own: no transforms, no masked key column (``None``: read the
    table whole instead)."""
    read_key = getattr(plugin, "read_key", None)
    if read_key is None or pipeline.chain() or set(key) & set(masked):
        return None
    schema, _, name = table.partition(".")
    try:
        found: tuple[dict[str, Any] | None, bool] = read_key(
            pipeline.source, schema, name, key, envelope=pipeline.envelope
        )
    except LookupError:  # a key value the table's key types do not read
        return None
    return found


def _find(read: Any, key: dict[str, Any]) -> dict[str, Any] | None:
    wanted = key_text(key)
    match = None
    # Read to the end, not up to the key: a reader left mid-read may hold its server busy (the
    # PostgreSQL source's COPY: closing its connection then waits for the rest of the table).
    for found, row in read():
        # A source's key is the record key's columns; a row may hold them where the key does not.
        candidate = {c: found.get(c, row.get(c)) for c in key}
        if match is None and key_text(candidate) == wanted:
            match = dict(row)
    return match


def _without_where(pipeline: Any) -> Any:
    """The pipeline with its tables' row filters left out (to tell a filtered row from none)."""
    tables = [t.model_copy(update={"where": None}) for t in pipeline.source.tables]
    source = pipeline.source.model_copy(update={"tables": tables})
    return pipeline.model_copy(update={"source": source})


def _ops(entries: list[Any]) -> dict[str, Any] | None:
    """The ``ops`` of the table's entries that leave operations out, if any."""
    limited = {e.name: list(e.ops) for e in entries if e.ops is not None}
    return limited or None


def _columns(entries: list[Any]) -> dict[str, Any] | None:
    selected = {
        e.name: e.columns.model_dump(exclude_none=True) for e in entries if e.columns is not None
    }
    return selected or None


def source_masked(pipeline: Any, table: str) -> list[str]:
    """The columns of ``table`` the configuration masks (their values reach no sink)."""
    entries = [pipeline.source.table_entry(t) for t in pipeline.routed_from(table)]
    return sorted({c for e in entries for c in e.mask})
