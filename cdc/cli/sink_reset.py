"""``cdc sink FILE NAME --reset-table T``: ask a sink to rebuild a table from the log.

The request goes to the control topic (:mod:`cdc.runtime.sink_control`); the sink's own task
applies it (:mod:`cdc.runtime.sink_resets`), so the command works the same whether the pipeline
runs or not, and never writes to a sink's store behind a running sink's back.
"""

from __future__ import annotations

import click

from cdc.cli.sink_reset_wait import follow
from cdc.config.pipeline import Pipeline
from cdc.contracts.errors import CdcError
from cdc.log.factory import open_log
from cdc.runtime.sink_control import SinkControl
from cdc.runtime.sink_names import group_name, sink_topics

EXIT_OK, EXIT_RUNTIME, EXIT_CONFIG = 0, 1, 2


def request_resets(
    pipeline: Pipeline, sink: str, tables: tuple[str, ...], wait: bool, timeout_s: float
) -> int:
    """Record a reset of each of ``tables`` for ``sink``; with ``wait``, follow them until
    rebuilt. Returns the exit code."""
    problem = _unknown_names(pipeline, sink, tables)
    if problem is not None:
        click.echo(f"error: {problem}", err=True)
        return EXIT_CONFIG
    try:
        log = open_log(pipeline)
    except CdcError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_RUNTIME
    try:
        control = SinkControl(log, pipeline.name)
        requests = [control.request_reset(sink, table) for table in dict.fromkeys(tables)]
        for request in requests:
            click.echo(
                f"requested a reset of {request.table} in sink {sink} ({request.id}): "
                "a running pipeline applies it within seconds; otherwise the next `cdc run` "
                "(or `cdc sink FILE NAME`) applies it before reading anything"
            )
        if not wait:
            return EXIT_OK
        config = pipeline.sink(sink)
        topics = sink_topics(pipeline, config)
        return follow(log, control, requests, topics, group_name(pipeline.name, sink), timeout_s)
    except CdcError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_RUNTIME
    finally:
        log.close()


def _unknown_names(pipeline: Pipeline, sink: str, tables: tuple[str, ...]) -> str | None:
    """Why ``sink`` or one of ``tables`` is not the pipeline's (``None``: both are)."""
    config = next((s for s in pipeline.sinks if s.name == sink), None)
    if config is None:
        names = ", ".join(s.name for s in pipeline.sinks)
        return f"the pipeline has no sink {sink!r} (sinks: {names})"
    held = {f"{s}.{t}" for s, t in pipeline.sink_tables(config)}
    unknown = [t for t in tables if t not in held]
    if unknown:
        holds = ", ".join(sorted(held))
        return f"sink {sink!r} holds no table {', '.join(unknown)} (it holds: {holds})"
    return None
