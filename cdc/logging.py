"""Structured logging: events with stable dotted names and key-value fields.

JSON lines when stderr is not a terminal (pipelines run under supervisors that collect logs),
readable console output otherwise. Context (pipeline, source, sink) is bound once by the runtime.
"""

from __future__ import annotations

import logging
import sys

import structlog

Logger = structlog.typing.FilteringBoundLogger


def configure(level: str = "info", json: bool | None = None) -> None:
    """Set up structlog for the process.

    Args:
        level: minimum level name.
        json: force JSON (True) or console (False) output; None picks JSON off a terminal.
    """
    if json is None:
        json = not sys.stderr.isatty()
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(**context: object) -> Logger:
    """A logger with ``context`` bound to every event it logs."""
    logger: Logger = structlog.get_logger().bind(**context)
    return logger
