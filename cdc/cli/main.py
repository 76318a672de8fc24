"""The ``cdc`` command line.

Exit codes: 0 success, 1 runtime failure, 2 usage or config error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click
import orjson

from cdc.cli.snapshot import send_snapshot_signal, wait_for_request
from cdc.cli.support import EXIT_CONFIG
from cdc.cli.support import emit_json as _emit_json
from cdc.cli.support import load as _load
from cdc.cli.support import opened_log as _opened_log
from cdc.cli.support import runtime_errors as _runtime_errors
from cdc.config.models import parse_listen
from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.errors import ConfigError, PluginNotFound
from cdc.support.logging import configure

if TYPE_CHECKING:
    from cdc.cli.verify.comparison import TableComparison
    from cdc.log.base import Log

Report = TypeVar("Report")


@click.group()
@click.option("--log-level", default="info", show_default=True, help="Minimum log level.")
@click.option(
    "--log-json/--log-console", default=None, help="Log format (default: JSON off a TTY)."
)
def main(log_level: str, log_json: bool | None) -> None:
    """Change data capture pipelines: PostgreSQL and MongoDB into compacted topics and sinks."""
    configure(log_level, log_json)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
def validate(file: str) -> None:
    """Check a pipeline file; prints every problem with its YAML path (exit 2 if any)."""
    pipeline = _load(file)
    sinks = ", ".join(f"{s.name} ({s.type})" for s in pipeline.sinks) or "none"
    click.echo(
        f"{file}: valid pipeline {pipeline.name!r}: source {pipeline.source.type}, "
        f"log {pipeline.log.type}, sinks: {sinks}"
    )


METRICS_LISTEN = click.option(
    "--metrics-listen",
    metavar="ADDR",
    default=None,
    help="Serve /metrics, /healthz and /readyz on ADDR (host:port); overrides metrics.listen.",
)


def _with_metrics_listen(pipeline: Pipeline, listen: str | None) -> Pipeline:
    """``pipeline`` with ``--metrics-listen`` applied; a bad address is a usage error."""
    if listen is None:
        return pipeline
    try:
        parse_listen(listen)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--metrics-listen") from exc
    return pipeline.with_metrics_listen(listen)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--role",
    type=click.Choice(["all", "source", "sinks"]),
    default="all",
    show_default=True,
    help="Run the source, the sinks, or both.",
)
@click.option("--sink", "sink_names", multiple=True, help="With --role sinks: only these sinks.")
@click.option(
    "--accept-envelope-change",
    is_flag=True,
    help="Store the file's envelope: encoding where the log was written under another one.",
)
@METRICS_LISTEN
def run(
    file: str,
    role: str,
    sink_names: tuple[str, ...],
    accept_envelope_change: bool,
    metrics_listen: str | None = None,
) -> None:
    """Run the pipeline until SIGINT or SIGTERM, then stop cleanly."""
    from cdc.runtime.fingerprints import TransformsChanged
    from cdc.runtime.pipeline import run_until_signalled

    pipeline = _with_metrics_listen(_load(file), metrics_listen)
    if pipeline.log.type == "embedded":
        from cdc.log.embedded import appender

        appender.announce("info")  # the run's record; other commands log it at debug level
    _check_sinks(pipeline, sink_names)
    with _runtime_errors():
        try:
            code = run_until_signalled(
                pipeline, role, list(sink_names) or None, accept_envelope_change
            )
        except ConfigError as exc:  # the log was written under another encoding or transforms
            what = (
                "other transforms or table filters"
                if isinstance(exc, TransformsChanged)
                else "another envelope encoding"
            )
            click.echo(f"{file}: the log was written under {what}", err=True)
            for where, message in exc.problems:
                click.echo(f"  {where or '(file)'}: {message}", err=True)
            sys.exit(EXIT_CONFIG)
    sys.exit(code)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("name")
@click.option(
    "--reset-table",
    "reset_tables",
    multiple=True,
    metavar="T",
    help="Rebuild table T (schema.table) of this sink from the log, instead of running it.",
)
@click.option("--wait", is_flag=True, help="With --reset-table: wait until the table is rebuilt.")
@click.option("--timeout-s", type=click.FloatRange(min=0), default=300.0, show_default=True)
@click.option("--rebuild", is_flag=True, help="Rebuild the sink from the compacted log.")
@click.option(
    "--into", multiple=True, metavar="PATH_OR_DSN", help="With --rebuild: a new copy (or FIELD=V)."
)
@click.option("--as-of", metavar="POSITION", help="With --rebuild --into: a past state.")
@METRICS_LISTEN
@click.pass_context
def sink(
    ctx: click.Context,
    file: str,
    name: str,
    reset_tables: tuple[str, ...],
    wait: bool,
    timeout_s: float,
    rebuild: bool = False,
    into: tuple[str, ...] = (),
    as_of: str | None = None,
    metrics_listen: str | None = None,
) -> None:
    """Run one sink worker: the same as ``cdc run FILE --role sinks --sink NAME``.

    Start several on as many hosts as needed: with the Kafka log, they share the sink's
    partitions through its consumer group.

    With --reset-table T: drop the sink's copy of T and what it recorded about it, and rebuild
    it from the compacted log. This works whether or not the pipeline runs: the request is
    stored in the log, and the process that runs the sink applies it (a running one within
    a few seconds, restarting the sink if an error had stopped it; otherwise the next
    ``cdc run`` or ``cdc sink FILE NAME``, before it reads anything).

    With --rebuild: every table so (followed until caught up where a process runs the sink,
    else the sink runs here), or with --into a new copy beside the sink, built from the log
    here and holding the offsets it read up to, to swap in (--as-of: as of a past position,
    from a history-mode DuckDB sink). See docs/sinks/rebuild.md.
    """
    if rebuild or into or as_of:
        from cdc.cli.sink_rebuild import rebuild_command

        listen = metrics_listen

        def runner() -> None:  # an in-place rebuild that no running process applies
            ctx.invoke(run, file=file, role="sinks", sink_names=(name,), metrics_listen=listen)

        flags = (rebuild, bool(reset_tables), into, as_of)
        sys.exit(rebuild_command(_load(file), name, flags, timeout_s, runner))
    if not reset_tables:
        if wait:
            raise click.UsageError("--wait goes with --reset-table")
        ctx.invoke(run, file=file, role="sinks", sink_names=(name,), metrics_listen=metrics_listen)
        return
    from cdc.cli.sink_reset import request_resets

    sys.exit(request_resets(_load(file), name, reset_tables, wait, timeout_s))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def topics(file: str, as_json: bool) -> None:
    """List topics with partitions, offsets and record counts."""
    from cdc.cli.status import print_topics, topics_report

    _log_report(file, as_json, topics_report, print_topics)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(file: str, as_json: bool) -> None:
    """Show the source position, topic offsets and each sink's committed offset and lag."""
    from cdc.cli.status import print_status, status_report

    _log_report(file, as_json, status_report, print_status)


def _log_report(
    file: str,
    as_json: bool,
    build: Callable[[Log, Pipeline], Report],
    show: Callable[[Report], None],
) -> None:
    """The shape of the commands that read a report off the log: ``--json`` prints it as JSON,
    else ``show`` prints it for a person. The log is closed before anything is printed."""
    pipeline = _load(file)
    with _opened_log(pipeline) as log:
        report = build(log, pipeline)
    if as_json:
        _emit_json(report)
    else:
        show(report)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def doctor(file: str, as_json: bool) -> None:
    """Preflight: check the source, the log and every sink; each line ok or its fix.

    Exit 0 when no check failed (warnings pass), 1 otherwise, 2 for an invalid file.
    """
    from cdc.cli import doctor as doctor_mod

    checks = doctor_mod.run_checks(_load(file))
    if as_json:
        click.echo(doctor_mod.render_json(checks))
    else:
        for line in doctor_mod.render_text(checks):
            click.echo(line)
    sys.exit(doctor_mod.exit_code(checks))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset.")
@click.option("--max-records", type=click.IntRange(min=1), default=None, help="Stop after N.")
@click.option(
    "--timeout-s",
    type=click.FloatRange(min=0),
    default=None,
    help="Stop when nothing new arrived for S seconds.",
)
def tail(
    file: str, topic: str, from_beginning: bool, max_records: int | None, timeout_s: float | None
) -> None:
    """Print a topic's records, one JSON object a line."""
    from cdc.cli.tail import follow

    pipeline = _load(file)
    with _opened_log(pipeline) as log:
        known = {t.name for t in log.topics()}
        if topic not in known:
            click.echo(f"error: no topic {topic!r} (known: {', '.join(sorted(known))})", err=True)
            sys.exit(EXIT_CONFIG)
        for line in follow(log, topic, from_beginning, max_records, timeout_s):
            click.echo(line)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--sink", "sink", required=True, help="The sink to wait on.")
@click.option("--position", metavar="POS", help="A source position, as cdc status prints it.")
@click.option("--now", is_flag=True, help="The source's current position (the default).")
@click.option(
    "--timeout-s",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="How long to wait at most (exit 1 after).",
)
def wait(file: str, sink: str, position: str | None, now: bool, timeout_s: float) -> None:
    """Wait until SINK holds every change committed in the source up to POS (or now).

    Prints the position reached; exit 0 reached, 1 timeout, 2 bad arguments.
    """
    from cdc.cli.wait import wait_command

    wait_command(file, sink, position, now, timeout_s)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def drop(file: str, yes: bool) -> None:
    """Drop the source's replication objects (PostgreSQL: slot and publication)."""
    pipeline = _load(file)
    plugin = plugins.load(plugins.SOURCE_GROUP, pipeline.source.type)
    dropper = getattr(plugin, "drop", None)
    if dropper is None:
        click.echo(f"source type {pipeline.source.type!r} keeps nothing to drop")
        return
    if not yes:
        click.confirm(f"Drop the replication objects of pipeline {pipeline.name!r}?", abort=True)
    with _runtime_errors():
        for line in dropper(pipeline.source, pipeline.name):
            click.echo(line)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--attempts",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Comparisons before a difference counts (changes may be in flight).",
)
@click.option(
    "--wait-s",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    help="Pause between attempts.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Most differing keys to name per table.",
)
@click.option(
    "--wait",
    "wait_for_sinks_s",
    type=click.FloatRange(min=0),
    default=0.0,
    metavar="S",
    help="Give lagging sinks up to S seconds to reach the log's end before comparing (and a "
    "table's first schema as long to be published).",
)
@click.option("--sink", "sink_names", multiple=True, help="Only this sink (repeatable).")
@click.option("--table", "table_names", multiple=True, help="Only this table (repeatable).")
@click.option(
    "--repair",
    is_flag=True,
    help="Re-read the differing keys through the online snapshot (the pipeline must run), "
    "then verify again; exit 0 when everything agrees after the repair.",
)
@click.option(
    "--repair-timeout-s",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="With --repair: how long each repair request may take.",
)
def verify(
    file: str,
    as_json: bool,
    attempts: int,
    wait_s: float,
    limit: int,
    wait_for_sinks_s: float,
    sink_names: tuple[str, ...],
    table_names: tuple[str, ...],
    repair: bool = False,
    repair_timeout_s: float = 300.0,
) -> None:
    """Compare the source with every sink: counts, checksums, differing keys.

    A sink that has not consumed the log up to its end is reported LAGGING, with its offsets,
    instead of being compared. A table that cannot be compared (a sink type that cannot be
    read back, such as jsonl; a table the transforms make impossible to compare) is NOT
    VERIFIABLE. The last line sums it up. Exit 0 if every table was compared and agrees, 1 if
    any is DIFFERENT, LAGGING or NOT VERIFIABLE (--sink leaves a sink out; --json says
    which), 2 for a usage error.

    With --repair: the differing keys of each table are re-read by the running pipeline
    through its online snapshot (as `cdc snapshot --where` does; a key the source no longer
    has is deleted), then the sinks are given --wait (at least 60 s) to catch up and the
    comparison runs again. Prints (and --json lists) the keys repaired per table and sink.
    """
    from cdc.cli.verify.command import VerifyOptions, run_verify
    from cdc.cli.verify.compare import verify_pipeline
    from cdc.cli.verify_views import verify_views, without_views
    from cdc.runtime.schemas import SchemaCatalog

    pipeline = _load(file)
    _check_names(pipeline, sink_names, table_names)
    compared = without_views(pipeline, table_names)  # views: compared by verify_views

    def compare(wait_for_sinks_s: float) -> list[TableComparison]:
        with _opened_log(pipeline) as log:
            results = (
                []
                if compared is None
                else verify_pipeline(
                    pipeline,
                    # A table's first schema is waited for as long as the sinks are (--wait).
                    SchemaCatalog(log, pipeline.name, wait_s=wait_for_sinks_s),
                    attempts,
                    wait_s,
                    limit,
                    log=log,
                    wait_for_sinks_s=wait_for_sinks_s,
                    sinks=sink_names,
                    tables=compared or (),
                )
            )
            results += verify_views(
                pipeline, log, sink_names, table_names, attempts, wait_s, wait_for_sinks_s
            )
        return results

    options = VerifyOptions(wait_for_sinks_s, repair, repair_timeout_s)
    sys.exit(run_verify(pipeline, compare, options, as_json))


def _check_names(pipeline: Pipeline, sinks: tuple[str, ...], tables: tuple[str, ...]) -> None:
    _check_sinks(pipeline, sinks)
    known = {f"{s}.{t}" for sink in pipeline.sinks for s, t in pipeline.sink_tables(sink)}
    missing = [t for t in tables if t not in known]
    if missing:
        raise click.UsageError(f"no sink holds table(s): {', '.join(missing)}")


def _check_sinks(pipeline: Pipeline, names: tuple[str, ...]) -> None:
    """``--sink`` names the pipeline has: one it lacks is a usage error (exit 2), told before
    anything is opened."""
    unknown = [n for n in names if n not in {s.name for s in pipeline.sinks}]
    if unknown:
        raise click.UsageError(f"unknown sink(s): {', '.join(unknown)}")


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("table")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def trace(file: str, table: str, key: str, as_json: bool) -> None:
    """One key's path: its versions in the log, the source's row, the version each sink holds
    and why it skipped the others, and the first hop that diverged. KEY is the record key's
    JSON ('{"id": 42}') or the bare value of a one-column key. Exit 0 diverged or not, 1 when a
    store cannot be reached, 2 for a bad TABLE or KEY."""
    from cdc.cli.trace_report import run as run_trace

    sys.exit(run_trace(_load(file), table, key, as_json))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("table")
@click.argument("query")
@click.option("--sink", "sink_name", default=None, help="The search sink (default: the first).")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True)
def search(file: str, table: str, query: str, sink_name: str | None, limit: int) -> None:
    """Query a search sink's index of TABLE (schema.table); prints matching rows as JSON lines.

    A searchable sink is one whose plugin has ``search`` (``search``, ``opensearch``)."""
    pipeline = _load(file)
    named = [s for s in pipeline.sinks if sink_name in (None, s.name)]
    candidates = [s for s in named if _searchable(s.type)]
    if not candidates:
        raise click.UsageError("the pipeline has no such search sink")
    config = candidates[0]
    if tuple(table.split(".", 1)) not in pipeline.sink_tables(config):
        raise click.UsageError(f"sink {config.name!r} does not index {table!r}")
    plugin = plugins.load(plugins.SINK_GROUP, config.type)
    schema_name, _, table_name = table.partition(".")
    with _runtime_errors():
        hits = plugin.search(config, schema_name, table_name, query, limit, pipeline=pipeline.name)
        for hit in hits:
            click.echo(orjson.dumps(hit).decode())


def _searchable(sink_type: str) -> bool:
    try:
        return hasattr(plugins.load(plugins.SINK_GROUP, sink_type), "search")
    except PluginNotFound:  # a plugin whose extra is missing searches nothing here
        return False


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--table", "table", default=None, help="The table to re-snapshot (schema.table).")
@click.option(
    "--where",
    default=None,
    help="Only rows matching this SQL expression (trusted: the operator's own SQL).",
)
@click.option(
    "--cancel",
    "cancel_id",
    default=None,
    metavar="ID",
    help="Drop request ID, queued, running or failed (`cdc status` lists the IDs).",
)
@click.option("--cancel-all", is_flag=True, help="Drop every snapshot request.")
@click.option("--wait", is_flag=True, help="Wait until the request ends, printing progress.")
@click.option("--timeout-s", type=click.FloatRange(min=0), default=None, help="Give up waiting.")
def snapshot(
    file: str,
    table: str | None,
    where: str | None,
    cancel_id: str | None,
    cancel_all: bool,
    wait: bool,
    timeout_s: float | None,
) -> None:
    """Re-snapshot a table while `cdc run` keeps streaming (watermark-based, never pauses it),
    or cancel snapshot requests. Works whether or not `cdc run` is running: the pipeline acts on
    the request when it reads it from the change stream."""
    if sum(1 for given in (table, cancel_id, cancel_all or None) if given) != 1:
        raise click.UsageError("give exactly one of --table, --cancel ID, --cancel-all")
    if where is not None and table is None:
        raise click.UsageError("--where goes with --table")
    pipeline = _load(file)
    sent = send_snapshot_signal(pipeline, table, where, cancel_id)
    if sent is not None and wait:
        wait_for_request(pipeline, *sent, timeout_s)


if __name__ == "__main__":
    main()
