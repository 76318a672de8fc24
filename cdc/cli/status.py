"""Reports for ``cdc status`` and ``cdc topics``: plain data first, then a terminal rendering."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from cdc.cli.status_consistency import consistent_positions, stored_positions
from cdc.cli.status_liveness import as_running, as_served, print_processes
from cdc.cli.status_views import print_views, views_report
from cdc.cli.status_workers import print_workers, workers_report
from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.errors import CdcError
from cdc.contracts.snapshot_offsets import folded, stream_offsets
from cdc.log.base import Log, TopicPartition
from cdc.log.encoding import LEGACY, read_encoding
from cdc.metrics.snapshot_report import print_snapshots, snapshot_report
from cdc.runtime import heartbeat
from cdc.runtime.sink_control import SinkControl, sink_state_report
from cdc.runtime.sink_names import group_name, sink_topics
from cdc.support.redact import redact

NOT_TRACKED = "the embedded log has none: one process reads every partition"


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
    """Each sink's committed offsets and lag (records not yet applied) per topic and per
    partition, its consumer group's members and who owns which partition, and its state
    (running, or stopped and why) with its table resets."""
    report = []
    existing = {info.name for info in log.topics()}
    control = SinkControl(log, pipeline.name)
    for sink in pipeline.sinks:
        group = group_name(pipeline.name, sink.name)
        committed = log.committed_offsets(group)
        members = group_report(log, group)
        owners = {
            (topic, partition): m["member_id"]
            for m in members.get("members") or []
            for topic, partition in m["assigned"]
        }
        topics = [
            _topic_lag(log, topic, topic in existing, committed, owners)
            for topic in sink_topics(pipeline, sink)
        ]
        for member in members.get("members") or []:
            member["partitions"] = [f"{t}[{p}]" for t, p in member.pop("assigned")]
        report.append(
            {
                "sink": sink.name,
                "type": sink.type,
                "lag": sum(t["lag"] for t in topics),
                "topics": topics,
                "group": members,
                **sink_state_report(control, sink.name),
            }
        )
        workers = workers_report(log, pipeline, sink.name, sink.type, group_report)
        if workers is not None:  # a single-writer sink on Kafka: who leads, who stands by
            report[-1]["workers"] = workers
    return report


def _topic_lag(
    log: Log,
    topic: str,
    exists: bool,
    committed: dict[TopicPartition, int],
    owners: dict[tuple[str, int], str],
) -> dict[str, Any]:
    """One topic of a sink: committed, end and lag in all, and per partition with its owner
    (the member id, ``None`` while no member holds it)."""
    ends = log.end_offsets(topic) if exists else {}
    partitions: list[dict[str, Any]] = [
        {
            "partition": p,
            "committed": committed.get(TopicPartition(topic, p), 0),
            "end": end,
            "lag": end - committed.get(TopicPartition(topic, p), 0),
            "owner": owners.get((topic, p)),
        }
        for p, end in sorted(ends.items())
    ]
    done = sum(row["committed"] for row in partitions)
    end = sum(ends.values())
    return {
        "topic": topic,
        "committed": done,
        "end": end,
        "lag": end - done,
        "partitions": partitions,
    }


def group_report(log: Log, group: str) -> dict[str, Any]:
    """The consumer group as the log knows it: on Kafka its state and members, each with
    client id, host and partitions; the embedded log tracks no members (every consumer reads
    every partition)."""
    describe = getattr(log, "describe_group", None)  # only the Kafka log has members
    if describe is None:
        return {"id": group, "state": "not tracked", "members": None, "note": NOT_TRACKED}
    try:
        found = describe(group)
    except CdcError as exc:  # status shows what it can while the coordinator is away
        return {"id": group, "state": "unknown", "members": None, "error": redact(str(exc))}
    return {
        "id": group,
        "state": found.state,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "assigned": [(tp.topic, tp.partition) for tp in m.partitions],
            }
            for m in found.members
        ],
    }


def source_report(log: Log, pipeline: Pipeline) -> dict[str, Any]:
    """The stored source offsets, plus what the source plugin can tell (slot lag...)."""
    offsets = folded(log.source_offsets())  # snapshot progress as one entry, as always shown
    report: dict[str, Any] = {"type": pipeline.source.type, "offsets": offsets}
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
    found = heartbeat.processes(log, pipeline.name)
    consistent = consistent_positions(log, pipeline, found)  # what cdc wait waits for
    sinks = [as_served(sink, found) for sink in sink_report(log, pipeline)]
    stored = stored_positions(pipeline, found)  # in each stopped sink's own store
    for sink in sinks:
        sink["stored_position"] = stored.get(sink["sink"])
        sink["consistent_position"] = consistent.get(sink["sink"]) or sink["stored_position"]
    report = {
        "pipeline": pipeline.name,
        "log": pipeline.log.type,
        "processes": found,
        "source": source,
        "snapshot": as_running(snapshot_report(source["offsets"]), found),
        "topics": topics_report(log, pipeline),
        "sinks": sinks,
        "views": views_report(log, pipeline, found),
        "envelope": envelope_report(log, pipeline),
    }
    if pipeline.log.type == "embedded":
        report["log_appender"] = appender_report()
    return report


#: The width off a terminal: wide enough that no name is ever cut (a table is only as wide as
#: its content; rich would otherwise take 80 columns for a pipe, a file or ``watch``).
UNLIMITED_WIDTH = 100_000


def report_console() -> Console:
    """Where a report prints: a terminal's own width (a long name then folds onto the next
    line, whole), and no width limit when stdout is not a terminal, so a script or a person
    piping to ``less`` or ``grep`` reads every topic and table name whole."""
    if not sys.stdout.isatty():
        return Console(width=UNLIMITED_WIDTH)
    try:  # asked here: rich takes 80 columns for any terminal whose TERM says "dumb"
        size = os.get_terminal_size(sys.stdout.fileno())
    except OSError:
        return Console()
    return Console(width=size.columns or None, height=size.lines or None)


def whole_table(*headers: str, title: str | None = None) -> Table:
    """A table whose cells fold where the terminal is too narrow, never end in an ellipsis:
    a topic name cut to ``p1.public.t_i…`` names nothing."""
    return Table(*(Column(h, overflow="fold") for h in headers), title=title)


def print_topics(report: list[dict[str, Any]], console: Console | None = None) -> None:
    table = whole_table("topic", "partitions", "start", "end", "records")
    for row in report:
        table.add_row(
            row["topic"],
            str(row["partitions"]),
            _offsets(row["start_offsets"]),
            _offsets(row["end_offsets"]),
            str(row["records"]),
        )
    (console or report_console()).print(table)


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
    console = report_console()
    console.print(f"[bold]pipeline[/bold] {report['pipeline']}  [bold]log[/bold] {report['log']}")
    print_processes(report.get("processes") or [], console)
    appender = report.get("log_appender")
    if appender is not None:
        console.print(f"  appender: {appender['implementation']} ({escape(appender['reason'])})")
    source = report["source"]
    console.print(f"[bold]source[/bold] {source['type']}")
    for key, value in source.items():
        if key in ("type", "snapshot"):  # snapshot progress gets its own table below
            continue
        if key == "offsets":
            value = stream_offsets(value)
        console.print(f"  {key}: {value}")
    print_envelope(report.get("envelope"), console)
    print_snapshots(report.get("snapshot") or [], console)
    print_topics(report["topics"], console)
    print_sink_lag(report["sinks"], console)
    print_groups(report["sinks"], console)
    print_sink_states(report["sinks"], console)
    print_views(report.get("views") or [], console)


def print_sink_lag(sinks: list[dict[str, Any]], console: Console) -> None:
    """One row per partition of every sink's topics: offsets, lag and the member owning it
    (``#n``, as :func:`print_groups` numbers them)."""
    table = whole_table("sink", "type", "topic", "partition", "committed", "end", "lag", "owner")
    for sink in sinks:
        numbers = _member_numbers(sink)
        for row in sink["topics"]:
            for part in row.get("partitions") or [{**row, "partition": "-"}]:
                owner = part.get("owner")
                table.add_row(
                    sink["sink"],
                    sink["type"],
                    row["topic"],
                    str(part["partition"]),
                    str(part["committed"]),
                    str(part["end"]),
                    str(part["lag"]),
                    "-" if owner is None else numbers.get(owner, owner),
                )
    console.print(table)


def print_groups(sinks: list[dict[str, Any]], console: Console) -> None:
    """Each sink's consumer group: state, then its members numbered, with what they own."""
    for sink in sinks:
        group = sink.get("group")
        if group is None:
            continue
        members = group.get("members")
        line = f"group {group['id']} (sink {sink['sink']}): "
        if members is None and group["state"] == "not tracked":
            line += f"members not tracked ({group.get('note')})"
        elif members is None:
            line += f"{group['state']}, members unknown: {group.get('error')}"
        else:
            line += f"{group['state']}, {len(members)} member{'' if len(members) == 1 else 's'}"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
        numbers = _member_numbers(sink)
        for member in members or []:
            owned = ", ".join(member["partitions"]) or "no partitions"
            line = (
                f"  {numbers[member['member_id']]} {member['member_id']} "
                f"(client {member['client_id']} at {member['host']}): {owned}"
            )
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def _member_numbers(sink: dict[str, Any]) -> dict[str, str]:
    members = (sink.get("group") or {}).get("members") or []
    return {m["member_id"]: f"#{i}" for i, m in enumerate(members, 1)}


def print_sink_states(sinks: list[dict[str, Any]], console: Console) -> None:
    """Each sink's state, why it stopped, and its table resets: one line each, unwrapped, so a
    long reason stays whole (and greppable)."""
    for sink in sinks:
        state = sink.get("state", "unknown")
        since = _time(sink.get("since_ms"))
        line = f"sink {sink['sink']}: {state.upper() if state == 'stopped' else state}"
        line += f" since {since}" if since else ""
        line += f": {sink['reason']}" if sink.get("reason") else ""
        position = sink.get("consistent_position")
        line += f"; consistent up to source position {position}" if position else ""
        if sink.get("stored_position"):
            line += f" (its store holds {sink['stored_position']} with its offsets)"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
        print_workers(sink, console)
        for reset in sink.get("resets", []):
            note = f"  reset of {reset['table']} ({reset['id']}): {reset['state']}"
            note += f": {reset['reason']}" if reset.get("reason") else ""
            console.print(note, markup=False, highlight=False, soft_wrap=True)


def _time(ms: int | None) -> str:
    if not ms:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _offsets(offsets: dict[str, int]) -> str:
    return " ".join(f"{p}:{o}" for p, o in offsets.items())
