"""Reports for ``cdc status`` and ``cdc topics``: plain data first, then a terminal rendering."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cdc import plugins
from cdc.config import Pipeline
from cdc.log.base import Log, TopicPartition
from cdc.log.encoding import LEGACY, read_encoding
from cdc.redact import redact
from cdc.runtime.pipeline import sink_topics
from cdc.runtime.sink_control import SinkControl, sink_state_report
from cdc.runtime.sink_task import group_name
from cdc.snapshot_report import print_snapshots, snapshot_report


def topics_report(log: Log, pipeline: Pipeline) -> list[dict[str, Any]]:
    """Every topic of the log with partitions, offsets and live record counts."""
    return [
        {
            "topic": info.name,
            "partitions": info.partitions,
            "start_offsets": {str(p): o for p, o in sorted(info.start_offsets.items())},
            "end_offsets": {str(p): o for p, o in sorted(info.end_offsets.items())},
            "records": info.record_count,
            "config": info.config,
        }
        for info in sorted(log.topics(), key=lambda i: i.name)
        if info.name.startswith(f"{pipeline.name}.")
    ]


def sink_report(log: Log, pipeline: Pipeline) -> list[dict[str, Any]]:
    """Each sink's committed offsets and lag (records not yet applied) per topic, and its state
    (running, or stopped and why) with its table resets."""
    report = []
    existing = {info.name for info in log.topics()}
    control = SinkControl(log, pipeline.name)
    for sink in pipeline.sinks:
        committed = log.committed_offsets(group_name(pipeline.name, sink.name))
        topics = []
        total_lag = 0
        for topic in sink_topics(pipeline, sink):
            ends = log.end_offsets(topic) if topic in existing else {}
            done = sum(committed.get(TopicPartition(topic, p), 0) for p in ends)
            end = sum(ends.values())
            topics.append({"topic": topic, "committed": done, "end": end, "lag": end - done})
            total_lag += end - done
        report.append(
            {
                "sink": sink.name,
                "type": sink.type,
                "lag": total_lag,
                "topics": topics,
                **sink_state_report(control, sink.name),
            }
        )
    return report


def source_report(log: Log, pipeline: Pipeline) -> dict[str, Any]:
    """The stored source offsets, plus what the source plugin can tell (slot lag...)."""
    report: dict[str, Any] = {"type": pipeline.source.type, "offsets": log.source_offsets()}
    plugin = plugins.load(plugins.SOURCE_GROUP, pipeline.source.type)
    probe = getattr(plugin, "status", None)
    if probe is not None:
        try:
            report.update(probe(pipeline.source, pipeline.name, report["offsets"]))
        except Exception as exc:  # status must show what it can even when the source is down
            report["error"] = redact(str(exc))  # a driver's error may quote the DSN
    return report


def appender_report() -> dict[str, str]:
    """Which appender the embedded log uses in this install, and why: the same selection a
    run makes, unless its environment sets ``CDC_NATIVE`` differently."""
    from cdc.log.embedded import appender

    return appender.SELECTION._asdict()


def status_report(log: Log, pipeline: Pipeline) -> dict[str, Any]:
    source = source_report(log, pipeline)
    report = {
        "pipeline": pipeline.name,
        "log": pipeline.log.type,
        "source": source,
        "snapshot": snapshot_report(source["offsets"]),
        "topics": topics_report(log, pipeline),
        "sinks": sink_report(log, pipeline),
        "envelope": envelope_report(log, pipeline),
    }
    if pipeline.log.type == "embedded":
        report["log_appender"] = appender_report()
    return report


def print_topics(report: list[dict[str, Any]]) -> None:
    table = Table("topic", "partitions", "start", "end", "records")
    for row in report:
        table.add_row(
            row["topic"],
            str(row["partitions"]),
            _offsets(row["start_offsets"]),
            _offsets(row["end_offsets"]),
            str(row["records"]),
        )
    Console().print(table)


def envelope_report(log: Log, pipeline: Pipeline) -> dict[str, Any]:
    """The encoding stored in the log, and whether the pipeline file's ``envelope:`` matches."""
    stored = read_encoding(log, pipeline.name)
    if stored is None:
        return {"stored": None, "matches_file": True, "file": pipeline.envelope.encoding()}
    return {
        "stored": stored.to_json(),
        "matches_file": not stored.differences(pipeline.envelope) and stored.name != LEGACY,
        "file": pipeline.envelope.encoding(),
    }


def print_envelope(report: dict[str, Any] | None, console: Console) -> None:
    if report is None:
        return
    stored = report["stored"]
    if stored is None:
        console.print("[bold]envelope[/bold] none stored yet (the next cdc run stores the file's)")
        return
    options = ", ".join(f"{k}={v}" for k, v in stored["options"].items()) or "-"
    verdict = "matches the file" if report["matches_file"] else "DIFFERS from the file"
    console.print(f"[bold]envelope[/bold] {stored['name']} ({escape(options)}): {verdict}")
    if stored["since"]:
        console.print(f"  since: {stored['since']}")


def print_status(report: dict[str, Any]) -> None:
    console = Console()
    console.print(f"[bold]pipeline[/bold] {report['pipeline']}  [bold]log[/bold] {report['log']}")
    appender = report.get("log_appender")
    if appender is not None:
        console.print(f"  appender: {appender['implementation']} ({escape(appender['reason'])})")
    source = report["source"]
    console.print(f"[bold]source[/bold] {source['type']}")
    for key, value in source.items():
        if key in ("type", "snapshot"):  # snapshot progress gets its own table below
            continue
        if key == "offsets":
            value = _without_snapshots(value)
        console.print(f"  {key}: {value}")
    print_envelope(report.get("envelope"), console)
    print_snapshots(report.get("snapshot") or [], console)
    print_topics(report["topics"])
    sinks = Table("sink", "type", "topic", "committed", "end", "lag")
    for sink in report["sinks"]:
        for row in sink["topics"]:
            sinks.add_row(
                sink["sink"],
                sink["type"],
                row["topic"],
                str(row["committed"]),
                str(row["end"]),
                str(row["lag"]),
            )
    console.print(sinks)
    print_sink_states(report["sinks"], console)


def print_sink_states(sinks: list[dict[str, Any]], console: Console) -> None:
    """Each sink's state, why it stopped, and its table resets: one line each, unwrapped, so a
    long reason stays whole (and greppable)."""
    for sink in sinks:
        state = sink.get("state", "unknown")
        since = _time(sink.get("since_ms"))
        line = f"sink {sink['sink']}: {state.upper() if state == 'stopped' else state}"
        line += f" since {since}" if since else ""
        line += f": {sink['reason']}" if sink.get("reason") else ""
        console.print(line, markup=False, highlight=False, soft_wrap=True)
        for reset in sink.get("resets", []):
            note = f"  reset of {reset['table']} ({reset['id']}): {reset['state']}"
            note += f": {reset['reason']}" if reset.get("reason") else ""
            console.print(note, markup=False, highlight=False, soft_wrap=True)


def _time(ms: int | None) -> str:
    if not ms:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _without_snapshots(offsets: dict[str, Any]) -> dict[str, Any]:
    """The stored offsets without snapshot progress, top-level (the view every source writes)
    or inside a source's own entry (MongoDB's running snapshot, range by range)."""
    return {
        key: {k: v for k, v in value.items() if k != "snapshot"}
        if isinstance(value, dict)
        else value
        for key, value in offsets.items()
        if key != "snapshot"
    }


def _offsets(offsets: dict[str, int]) -> str:
    return " ".join(f"{p}:{o}" for p, o in offsets.items())
