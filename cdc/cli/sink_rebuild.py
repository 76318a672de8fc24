"""``cdc sink FILE NAME --rebuild [--into PATH_OR_DSN] [--as-of POSITION]``.

Sinks built from the compacted log, never from the source database:

- in place (no ``--into``): a reset of every table of the sink is recorded in the control
  topic, as ``--reset-table`` does for one (:mod:`cdc.runtime.sink_resets`). A process that
  runs the sink applies it and this command follows it until the sink caught up; when none
  runs, this command runs the sink itself (resets first, then streaming, until SIGINT);
- ``--into``: a copy beside the sink, built here (:mod:`cdc.runtime.rebuild_into`), holding
  the offsets it read up to, so it takes over from exactly there once swapped in;
- ``--as-of``: the state as of a past source position, from the history a history-mode sink
  kept (the plugin's ``rebuild_as_of``); the compacted log alone cannot, it keeps only each
  key's latest record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from cdc.cli.sink_reset_wait import follow
from cdc.config.models import SinkConfig
from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.errors import CdcError
from cdc.log.factory import open_log
from cdc.runtime.heartbeat import processes, runs_sink
from cdc.runtime.rebuild_into import CopyRefused, build_copy, copy_config, keeps_offsets
from cdc.runtime.sink_control import SinkControl
from cdc.runtime.sink_names import group_name, sink_topics
from cdc.support.logging import get_logger

EXIT_OK, EXIT_RUNTIME, EXIT_CONFIG = 0, 1, 2
NO_OFFSETS = (
    "sink {name} ({type}) keeps no offsets beside its data, only its consumer group's, so it "
    "cannot be reset or rebuilt; to send the log again from its start, give the sink a new "
    "name (a new group reads every topic from offset 0)"
)
NO_AS_OF = (
    "--as-of needs the versions a history-mode sink kept (DuckDB with mode: history): the "
    "compacted log keeps only each key's latest record, so it cannot give an older state"
)


def rebuild(
    pipeline: Pipeline,
    name: str,
    into: tuple[str, ...],
    as_of: str | None,
    timeout_s: float,
    run_here: Callable[[], None],
) -> int:
    """Rebuild sink ``name`` from the log; returns the exit code (``run_here`` runs the sink
    in this process, for an in-place rebuild that no process applies)."""
    config = next((s for s in pipeline.sinks if s.name == name), None)
    if config is None:
        names = ", ".join(s.name for s in pipeline.sinks)
        return _usage(f"the pipeline has no sink {name!r} (sinks: {names})")
    if as_of is not None and not into:
        return _usage("--as-of builds a copy: give it a place with --into")
    plugin = plugins.load(plugins.SINK_GROUP, config.type)
    if not into:
        return _in_place(pipeline, config, timeout_s, run_here)
    try:
        copy = copy_config(plugin, config, into)
    except CopyRefused as exc:
        return _usage(str(exc))
    if as_of is not None:
        return _as_of(plugin, pipeline, config, copy, as_of)
    return _into(pipeline, copy)


def _usage(message: str) -> int:
    click.echo(f"error: {message}", err=True)
    return EXIT_CONFIG


def _in_place(
    pipeline: Pipeline, config: SinkConfig, timeout_s: float, run_here: Callable[[], None]
) -> int:
    try:
        log = open_log(pipeline)
    except CdcError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_RUNTIME
    try:
        running = runs_sink(processes(log, pipeline.name), config.name)
        if not running and not keeps_offsets(pipeline, config, log):
            return _usage(NO_OFFSETS.format(name=config.name, type=config.type))
        control = SinkControl(log, pipeline.name)
        tables = [f"{s}.{t}" for s, t in pipeline.sink_tables(config)]
        requests = [control.request_reset(config.name, table) for table in tables]
        click.echo(f"requested a rebuild of sink {config.name} from the log ({len(tables)} tables)")
        if running:
            click.echo("a running process applies it; following it until the sink caught up")
            group = group_name(pipeline.name, config.name)
            topics = sink_topics(pipeline, config)
            return follow(log, control, requests, topics, group, timeout_s)
    except CdcError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_RUNTIME
    finally:
        log.close()
    click.echo("no process runs the sink: running it here (the rebuild first, then streaming)")
    run_here()
    return EXIT_OK


def _into(pipeline: Pipeline, copy: SinkConfig) -> int:
    logger = get_logger(pipeline=pipeline.name, sink=copy.name, rebuild="into")
    try:
        log = open_log(pipeline)
    except CdcError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_RUNTIME
    try:
        result = build_copy(pipeline, copy, log, logger)
    except CopyRefused as exc:
        return _usage(str(exc))
    except CdcError as exc:
        click.echo(f"error: {exc} (run the command again: the copy resumes from its offsets)")
        return EXIT_RUNTIME
    finally:
        log.close()
    rate = result.records / result.seconds if result.seconds else 0.0
    if result.interrupted:
        click.echo(f"interrupted after {result.records} records: run it again to resume")
        return EXIT_RUNTIME
    click.echo(
        f"rebuilt a copy of sink {copy.name} from the log: {result.records} records in "
        f"{result.seconds:.1f} s ({rate:,.0f} records/s). It holds the offsets it read up to: "
        "put its place in the pipeline file and the sink streams on from there"
    )
    return EXIT_OK


def _as_of(
    plugin: Any, pipeline: Pipeline, config: SinkConfig, copy: SinkConfig, as_of: str
) -> int:
    build = getattr(plugin, "rebuild_as_of", None)
    if build is None or getattr(config, "mode", None) != "history":
        return _usage(f"sink {config.name} ({config.type}) keeps no history. {NO_AS_OF}")
    position = _position(pipeline, as_of)
    if position is None:
        return _usage(f"--as-of {as_of!r} is not a source position (e.g. 0/16B3748, or a number)")
    try:
        summary = build(config, copy, position)
    except ValueError as exc:  # the history cannot give that position: a usage error
        return _usage(str(exc))
    except CdcError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_RUNTIME
    click.echo(f"built the state of sink {config.name} as of {as_of}: {summary}")
    return EXIT_OK


def _position(pipeline: Pipeline, text: str) -> int | None:
    """``text`` as the integer position sinks store: the source's own notation (its
    plugin's ``parse_position``, PostgreSQL's ``0/16B3748``), or a plain number."""
    parse = getattr(
        plugins.load(plugins.SOURCE_GROUP, pipeline.source.type), "parse_position", None
    )
    if parse is not None:
        try:
            return int(parse(text))
        except (ValueError, TypeError, CdcError):
            pass
    try:
        return int(text)
    except ValueError:
        return None


def rebuild_command(
    pipeline: Pipeline,
    name: str,
    flags: tuple[bool, bool, tuple[str, ...], str | None],
    timeout_s: float,
    run_here: Callable[[], None],
) -> int:
    """The command's options checked together (``--rebuild``, whether ``--reset-table`` was
    given, ``--into``, ``--as-of``), then :func:`rebuild`."""
    rebuild_flag, reset_tables, into, as_of = flags
    if not rebuild_flag:
        return _usage("--into and --as-of go with --rebuild")
    if reset_tables:
        return _usage("--rebuild rebuilds every table: leave --reset-table out")
    return rebuild(pipeline, name, into, as_of, timeout_s, run_here)
