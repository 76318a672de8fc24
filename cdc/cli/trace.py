"""``cdc trace FILE TABLE KEY``: one key's path from the source, through the log, to each sink.

The report (plain data, :func:`trace_key`; rendered by :mod:`cdc.cli.trace_report`):

- ``log``: the key's versions in its topic (:mod:`cdc.cli.trace_log`), each with its source
  position, commit time, partition and offset;
- ``source``: the key's current row as the sinks got it, and whether a row filter or ``ops``
  leave it out, and which columns are masked (:mod:`cdc.cli.trace_source`);
- ``sinks``: each sink's row and position for the key, and a verdict on every version
  (:mod:`cdc.cli.trace_sinks`);
- ``diverged_at``: the first hop where the key's state differs (``source → log``, ``log → sink
  NAME``), or ``None``. A sink that has not consumed the key's records yet is lagging, not
  divergent.
"""

from __future__ import annotations

from typing import Any

import orjson

from cdc.cli.trace_log import Version, dead_letters, key_versions
from cdc.cli.trace_sinks import (
    Canon,
    canonicalizer,
    expected,
    held_state,
    infer_held,
    not_newer,
    verdicts,
)
from cdc.cli.trace_source import source_masked, source_side
from cdc.cli.verify.sources import unverifiable
from cdc.contracts import plugins
from cdc.contracts.events import topic_name
from cdc.contracts.schema import TableSchema
from cdc.log.base import Log
from cdc.runtime.factories import source_record_rows
from cdc.runtime.sink_names import group_name

COMPACTION_NOTE = (
    "a compacted topic keeps only the versions compaction has not removed: older versions of "
    "this key may be gone from the log"
)

#: Column types whose bare KEY is taken as text, even when it reads as a JSON number.
_TEXT_TYPES = ("text", "character", "varchar", "uuid", "citext", "name", "bpchar", "char")


class TraceUsageError(ValueError):
    """A TABLE or KEY the pipeline does not have (exit 2)."""


def parse_key(text: str, schema: TableSchema | None, source_type: str) -> dict[str, Any]:
    """KEY as the record key: a JSON object of the key's columns (in key order), or the bare
    value of a one-column key.

    Raises:
        TraceUsageError: not a key of the table.
    """
    columns = (
        schema.key_columns if schema is not None else (["_id"] if source_type == "mongodb" else [])
    )
    try:
        value: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = text  # a bare text value: abc, not "abc"
    if isinstance(value, dict) and not _extended_value(value):
        if columns and sorted(value) != sorted(columns):
            raise TraceUsageError(f"KEY must name the key columns {columns}, not {sorted(value)}")
        if not value:
            raise TraceUsageError("KEY is an empty object")
        return {c: value[c] for c in columns} if columns else value
    if len(columns) != 1:
        raise TraceUsageError(
            f"a bare KEY needs a one-column key; give a JSON object of {columns or 'the key'}"
        )
    (column,) = columns
    if schema is not None and not isinstance(value, str) and _textual(schema, column):
        value = text  # 0042 is a text key's value, not the number 42
    return {column: value}


def _extended_value(value: dict[str, Any]) -> bool:
    """An Extended JSON value (``{"$oid": ...}``), not an object of key columns."""
    return bool(value) and all(name.startswith("$") for name in value)


def _textual(schema: TableSchema, column: str) -> bool:
    kind = next(c.type for c in schema.columns if c.name == column).lower()
    return kind.startswith(_TEXT_TYPES)


def check_table(pipeline: Any, table: str) -> None:
    """Raises TraceUsageError: ``table`` is no output table of the pipeline."""
    # A sink may take a table no source table routes to: a live join view (views.<name>).
    named = (f"{s}.{t}" for sink in pipeline.sinks for s, t in pipeline.sink_tables(sink))
    tables = list(dict.fromkeys([*pipeline.output_tables(), *named]))
    if table not in tables:
        raise TraceUsageError(f"no table {table!r} in the pipeline (tables: {', '.join(tables)})")


def trace_key(
    pipeline: Any, log: Log, table: str, key: dict[str, Any], schema: TableSchema | None
) -> dict[str, Any]:
    """The key's trace (see the module docstring).

    Raises:
        CdcError: the source, the log or a sink cannot be reached.
    """
    versions, partitions, how = key_versions(
        log, pipeline, table, key, source_record_rows(pipeline)
    )
    letters = dead_letters(log, pipeline.name, table, key)
    canon = canonicalizer(schema, pipeline.envelope, decoded=False)
    source = source_side(pipeline, table, key)
    schema_name, _, name = table.partition(".")
    topic = topic_name(pipeline.name, schema_name, name)
    sinks = [
        _sink(pipeline, config, log, topic, table, key, versions, letters, schema)
        for config in pipeline.sinks
        if (schema_name, name) in pipeline.sink_tables(config)
    ]
    # ops that leave changes out, or transforms whose values depend on the change: the source's
    # row is not what the log describes, on purpose (as for cdc verify).
    source["not_compared"] = (
        unverifiable(pipeline, table)
        if pipeline.routed_from(table)
        else "no source table routes to it (a live join view: cdc verify checks views)"
    )
    agrees = None if source["not_compared"] else _source_agrees(source, versions, canon)
    source["agrees_with_log"] = agrees
    report: dict[str, Any] = {
        "table": table,
        "key": key,
        "topic": topic,
        "partitions": partitions,
        "found_by": how,
        "compacted": _compacted(log, topic),
        "note": COMPACTION_NOTE,
        "versions": [v.to_json() for v in versions],
        "dead_letters": letters,
        "source": source,
        "sinks": sinks,
    }
    report["diverged_at"] = _diverged_at(report)
    return report


def _compacted(log: Log, topic: str) -> bool:
    for info in log.topics():
        if info.name == topic:
            return "compact" in info.config.get("cleanup.policy", "compact")
    return True


def latest(versions: list[Version]) -> Version | None:
    """The key's newest version by source position (a later record wins a tie)."""
    best = None
    for version in versions:
        if best is None or not_newer(best, version):
            best = version
    return best


def _source_agrees(source: dict[str, Any], versions: list[Version], canon: Canon) -> bool | None:
    if not source["readable"]:
        return None
    newest = latest(versions)
    in_log = None if newest is None or newest.removes else canon(newest.row)
    return canon(source["row"]) == in_log


def _sink(
    pipeline: Any,
    config: Any,
    log: Log,
    topic: str,
    table: str,
    key: dict[str, Any],
    versions: list[Version],
    letters: list[dict[str, Any]],
    schema: TableSchema | None,
) -> dict[str, Any]:
    group = log.committed_offsets(group_name(pipeline.name, config.name))
    committed = {tp.partition: o for tp, o in group.items() if tp.topic == topic}
    report: dict[str, Any] = {
        "sink": config.name,
        "type": config.type,
        "committed": {str(p): o for p, o in sorted(committed.items())},
        "masked": source_masked(pipeline, table),
    }
    try:
        keeps_positions, state = held_state(
            config, pipeline.name, table, key, schema is not None and schema.any_type_key
        )
    except LookupError as exc:
        return {**report, "state": "unreadable", "why": str(exc)}
    plugin = plugins.load(plugins.SINK_GROUP, config.type)
    decoded = bool(getattr(plugin, "rows_decoded", False))
    canons = (
        canonicalizer(schema, pipeline.envelope, decoded),
        canonicalizer(schema, pipeline.envelope, decoded=False),
    )
    mine = {
        int(d["offset"]): str(d["reason"])
        for d in letters
        if d["origin"] == f"sink:{config.name}" and d["offset"] is not None
    }
    report.update(_judged(versions, committed, mine, keeps_positions, state, canons))
    return report


def _judged(
    versions: list[Version],
    committed: dict[int, int],
    letters: dict[int, str],
    keeps_positions: bool,
    state: tuple[dict[str, Any] | None, tuple[Any, Any] | None] | None,
    canons: tuple[Canon, Canon],
) -> dict[str, Any]:
    """The sink's part of the report: what it holds, each version's verdict, its state.
    ``canons``: for the sink's rows, and for the log's."""
    canon, log_canon = canons
    row, position = (None, None) if state is None else state
    have = canon(row)
    judged = verdicts(versions, committed, letters, position if keeps_positions else None)
    if not keeps_positions or position is None:
        infer_held(versions, judged, have, log_canon)
    goal = expected(versions, judged)
    want = None if goal is None or goal.removes else log_canon(goal.row)
    lagging = any(v["verdict"] == "lagging" for v in judged)
    state_name = "consistent" if have == want else ("lagging" if lagging else "divergent")
    report = {
        "keeps_positions": keeps_positions,
        "row": _plain(row),
        "position": None if position is None else list(position),
        "holds": "nothing" if state is None else ("deleted" if row is None else "row"),
        "versions": [{"offset": v.offset, **d} for v, d in zip(versions, judged, strict=True)],
        "expected_offset": None if goal is None else goal.offset,
        "state": state_name,
    }
    if state_name == "divergent":
        report["why"] = _difference(have, want)
    return report


def _plain(row: dict[str, Any] | None) -> Any:
    """The store's row as JSON can carry it (``Decimal``, dates: their text)."""
    return None if row is None else orjson.loads(orjson.dumps(row, default=str))


def _difference(have: bytes | None, want: bytes | None) -> str:
    """Which columns differ (their names only: values may be masked or secret)."""
    if want is None:
        return "the sink holds a row the log's newest applied version deleted"
    if have is None:
        return "the sink lacks the row of the log's newest applied version"
    mine, theirs = orjson.loads(have), orjson.loads(want)
    columns = sorted(c for c in mine.keys() | theirs.keys() if mine.get(c) != theirs.get(c))
    return f"columns differ from the log's newest applied version: {', '.join(columns)}"


def _diverged_at(report: dict[str, Any]) -> str | None:
    if report["source"]["agrees_with_log"] is False:
        return "source → log"
    for sink in report["sinks"]:
        if sink["state"] == "divergent":
            return f"log → sink {sink['sink']}"
    return None
