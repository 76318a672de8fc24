"""``cdc trace``'s terminal rendering of :func:`cdc.cli.trace.trace_key`'s report."""

from __future__ import annotations

import time
from typing import Any

import click
import orjson

_MARKS = {
    "held": "HELD",
    "replaced": "replaced",
    "stale": "SKIPPED (stale)",
    "dead_lettered": "DEAD-LETTERED",
    "lagging": "not applied yet",
    "missing": "MISSING",
}


def print_trace(report: dict[str, Any]) -> None:
    """The key's path, one section a hop, then the verdict."""
    key = orjson.dumps(report["key"]).decode()
    click.echo(f"key {key} of {report['table']}")
    _print_log(report)
    _print_source(report["source"])
    for sink in report["sinks"]:
        _print_sink(sink)
    diverged = report["diverged_at"]
    click.echo("")
    click.echo(f"diverged at: {diverged}" if diverged else "no divergence: every hop agrees")


def _print_log(report: dict[str, Any]) -> None:
    partitions = ", ".join(str(p) for p in report["partitions"])
    click.echo(
        f"\nlog: topic {report['topic']}, partition {partitions} "
        f"({len(report['versions'])} version(s), found by {report['found_by']})"
    )
    if report["compacted"]:
        click.echo(f"  note: {report['note']}")
    for version in report["versions"]:
        click.echo(f"  {_version_line(version)}")
    for letter in report["dead_letters"]:
        # Its reason is shown under the sink that wrote it (a source's: here, whole).
        origin = str(letter["origin"])
        reason = "" if origin.startswith("sink:") else f": {letter['reason']}"
        click.echo(f"  dead letter from {origin}: record at offset {letter['offset']}{reason}")


def _version_line(version: dict[str, Any]) -> str:
    position = version["position"]
    where = f"offset {version['offset']} (partition {version['partition']})"
    own = version["change_position"]
    change = f" change at {own}" if own else ""
    committed = version["commit_ts_ms"]
    at = f" committed {_time(committed)}" if committed is not None else ""
    return f"{where}: op {version['op']}, position {position}{change}{at}"


def _print_source(source: dict[str, Any]) -> None:
    click.echo(f"\nsource: (by {source['read_by']})" if source["read_by"] else "\nsource:")
    if not source["readable"]:
        why = source.get("not_compared") or "the source type cannot be read back"
        click.echo(f"  not read: {why}")
        return
    if source["row"] is not None:
        click.echo(f"  current row: {orjson.dumps(source['row']).decode()}")
    elif source["excluded_by"]:
        click.echo(f"  the row exists but the row filter leaves it out: {source['excluded_by']}")
    else:
        click.echo("  no such row (deleted, or never there)")
    if source["ops"]:
        click.echo(f"  ops: {source['ops']}: the other operations never reach the log")
    if source["masked"]:
        click.echo(f"  masked columns (masked values in the log and sinks): {source['masked']}")
    if source["columns"]:
        click.echo(f"  columns: {source['columns']}")
    if source.get("not_compared"):
        click.echo(f"  not compared with the log: {source['not_compared']}")
        return
    agrees = source.get("agrees_with_log")
    click.echo(f"  agrees with the log's newest version: {'yes' if agrees else 'NO'}")


def _print_sink(sink: dict[str, Any]) -> None:
    click.echo(f"\nsink {sink['sink']} ({sink['type']}): {sink['state'].upper()}")
    if sink["state"] == "unreadable":
        click.echo(f"  {sink['why']}")
        return
    holds = sink["holds"]
    kept = f" at position {sink['position']}" if sink["position"] is not None else ""
    if holds == "row":
        click.echo(f"  holds{kept}: {orjson.dumps(sink['row'], default=str).decode()}")
    else:
        click.echo(f"  holds {'a delete' if holds == 'deleted' else 'nothing'}{kept}")
    if sink["masked"]:
        click.echo(f"  masked columns: {', '.join(sink['masked'])}")
    for version in sink["versions"]:
        why = f": {version['why']}" if version["why"] else ""
        click.echo(f"  offset {version['offset']}: {_MARKS[version['verdict']]}{why}")
    if sink.get("why"):
        click.echo(f"  divergent: {sink['why']}")


def _time(ms: int) -> str:
    seconds, millis = divmod(int(ms), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def run(pipeline: Any, table: str, key_text: str, as_json: bool) -> int:
    """``cdc trace``: the exit code (0 traced, diverged or not; 1 a store is unreachable; 2 a
    bad TABLE or KEY)."""
    from cdc.cli.support import EXIT_CONFIG, emit_json, opened_log, runtime_errors
    from cdc.cli.trace import TraceUsageError, check_table, parse_key, trace_key
    from cdc.runtime.schemas import SchemaCatalog

    with opened_log(pipeline) as log, runtime_errors():
        try:
            check_table(pipeline, table)
            schema_name, _, name = table.partition(".")
            schema = SchemaCatalog(log, pipeline.name, wait_s=0).get(schema_name, name)
            key = parse_key(key_text, schema, pipeline.source.type)
        except TraceUsageError as exc:
            click.echo(f"error: {exc}", err=True)
            return EXIT_CONFIG
        report = trace_key(pipeline, log, table, key, schema)
    if as_json:
        emit_json(report)
    else:
        print_trace(report)
    return 0
