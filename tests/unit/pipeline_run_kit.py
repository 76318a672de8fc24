"""A pipeline started in-process for a check, and stopped as ``cdc run`` stops it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cdc.config.pipeline import Pipeline


@contextmanager
def started(config: Pipeline, role: str = "sinks") -> Iterator[Any]:
    """The running pipeline of ``config``; stopped, its helpers joined and its log closed after."""
    from cdc.runtime.pipeline import start

    run = start(config, role=role)
    try:
        yield run
    finally:
        run.stop()
        assert run.wait(10)
        for helper in (run.control, run.heartbeat):  # as cdc run does, before the log closes
            if helper is not None:
                helper.join(10)
        run.log.close()
