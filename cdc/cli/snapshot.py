"""``cdc snapshot``'s requests and cancels: the signal to the source, and the wait for it."""

from __future__ import annotations

import sys
from typing import Any

import click

from cdc.cli.support import EXIT_CONFIG, EXIT_RUNTIME, opened_log
from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.errors import CdcError, ConfigError


def send_snapshot_signal(
    pipeline: Pipeline, table: str | None, where: str | None, cancel_id: str | None
) -> tuple[str, str] | None:
    """Request a snapshot of ``table``, or cancel ``cancel_id`` (``None``: every request).

    Returns:
        The request to follow and the state it should end in, or ``None``: a cancel that does
        not apply (already said why).
    """
    if table is not None:
        signal = _snapshot_signal(pipeline, "request_snapshot", table, where)
        click.echo(f"requested snapshot {signal['id']} of {table} (signal at {signal['lsn']})")
        return signal["id"], "done"
    if cancel_id is not None and not _cancel_applies(pipeline, cancel_id):
        return None
    signal = _snapshot_signal(pipeline, "cancel_snapshot", cancel_id)
    click.echo(f"cancel of {cancel_id or 'every request'} requested (signal at {signal['lsn']})")
    return cancel_id or signal["id"], "cancelled"


def wait_for_request(pipeline: Pipeline, target: str, expect: str, timeout_s: float | None) -> None:
    """Print the request's progress until it ends; exits with an error unless it ended as
    ``expect``, or on ``timeout_s``."""
    from cdc.metrics.progress import TerminalProgress, progress_echo
    from cdc.metrics.snapshot_report import follow_request

    cancel = expect == "cancelled"
    with opened_log(pipeline) as log, TerminalProgress(pipeline, request=target, show=not cancel):
        echo = progress_echo(click.echo, shown=not cancel)  # the display replaces the lines
        outcome = follow_request(log.source_offsets, target, timeout_s, echo, cancel)
    if outcome is None:
        click.echo(f"error: timed out waiting for {target}", err=True)
        sys.exit(EXIT_RUNTIME)
    click.echo(f"snapshot {target} {outcome}")
    if outcome != expect:
        sys.exit(EXIT_RUNTIME)


def _snapshot_signal(pipeline: Pipeline, name: str, *args: Any) -> dict[str, Any]:
    """Call the source plugin's ``request_snapshot`` or ``cancel_snapshot``; exits on error."""
    plugin = plugins.load(plugins.SOURCE_GROUP, pipeline.source.type)
    action = getattr(plugin, name, None)
    if action is None:
        verb = "snapshot on request" if name == "request_snapshot" else "cancel snapshots"
        click.echo(f"error: source type {pipeline.source.type!r} cannot {verb}", err=True)
        sys.exit(EXIT_CONFIG)
    try:
        signal: dict[str, Any] = action(pipeline.source, pipeline.name, *args)
    except ConfigError as exc:
        for where_, message in exc.problems:
            click.echo(f"error: {where_}: {message}", err=True)
        sys.exit(EXIT_CONFIG)
    except CdcError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_RUNTIME)
    return signal


def _cancel_applies(pipeline: Pipeline, request_id: str) -> bool:
    """Whether a cancel of ``request_id`` has anything to do; says why not, or warns when the
    request is not stored (yet: a pipeline that is not running has not read it)."""
    from cdc.metrics.snapshot_report import open_requests, request_outcome

    with opened_log(pipeline) as log:
        offsets = log.source_offsets()
    outcome = request_outcome(offsets, request_id)
    if outcome in ("done", "cancelled"):
        click.echo(f"snapshot request {request_id} is {outcome} already: nothing to cancel")
        return False
    known = open_requests(offsets)
    if request_id not in known:
        listed = ", ".join(f"{i} ({s})" for i, s in known.items()) or "none"
        click.echo(
            f"warning: no request {request_id} is stored (open requests: {listed}); the cancel "
            "still applies if the pipeline has yet to read that request",
            err=True,
        )
    return True
