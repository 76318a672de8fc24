"""``cdc wait``: a read-your-writes fence from a shell (:mod:`cdc.fence`).

Exit 0 once the sink holds every change up to the position (the position it is consistent up
to is printed), 1 on timeout (or the log or source unreachable), 2 on bad arguments.
"""

from __future__ import annotations

import sys

import click

from cdc import fence
from cdc.cli.support import EXIT_CONFIG, EXIT_RUNTIME, load, opened_log
from cdc.contracts.errors import CdcError
from cdc.runtime.sink_names import group_name, sink_topics


def wait_command(file: str, sink: str, position: str | None, now: bool, timeout_s: float) -> None:
    """Run the fence and exit with its code (see the module)."""
    if position is not None and now:
        _usage("--position and --now exclude each other")
    pipeline = load(file)
    try:
        config = fence.sink_config(pipeline, sink)
        hooks = fence.hooks(pipeline)
        target = fence.target_position(pipeline, hooks, position)
    except fence.FenceError as exc:
        _usage(str(exc))
    except CdcError as exc:  # the source away while reading its current position
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_RUNTIME)
    with opened_log(pipeline) as log:
        group, topics = group_name(pipeline.name, sink), sink_topics(pipeline, config)
        waiter = fence.Fence(log, group, topics, fence.longest_poll_s(pipeline))
        try:
            reached = waiter.wait(hooks.decode, target, timeout_s)
        except fence.FenceTimeout as exc:
            click.echo(f"timeout: sink {sink!r} did not reach {target}: {exc}", err=True)
            sys.exit(EXIT_RUNTIME)
    click.echo(str(reached))


def _usage(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_CONFIG)
