"""Structured logging: events with stable dotted names and key-value fields.

JSON lines when stderr is not a terminal (pipelines run under supervisors that collect logs),
readable console output otherwise. Context (pipeline, source, sink) is bound once by the runtime.
Every string of every event, a formatted traceback included, goes through
:func:`cdc.support.redact.redact` last, and so does a traceback Python prints for an uncaught error:
a driver's message that quotes a DSN loses its secrets on the way out, whoever logged it.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Mapping, MutableMapping
from types import TracebackType
from typing import Any, TextIO, cast

import structlog

from cdc.support.redact import MASK, field_names_secret, redact

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
            redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=False,
    )
    sys.excepthook = _redacted_excepthook
    threading.excepthook = _redacted_thread_excepthook


class _CurrentStderr:
    """``sys.stderr`` as it is at each write, not as it was at :func:`configure`: a live
    display (:mod:`cdc.metrics.progress`) swaps it for a proxy that prints lines above itself."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def redact_event(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """The structlog processor that redacts every string of an event, nested ones too, and
    masks whole any value whose field names a secret (``password=...``)."""
    return _redacted_fields(event)


def _redacted_fields(fields: Mapping[Any, Any]) -> dict[Any, Any]:
    return {
        key: MASK
        if isinstance(key, str) and value is not None and field_names_secret(key)
        else _redacted(value)
        for key, value in fields.items()
    }


def _redacted(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return _redacted_fields(value)
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_redacted(v) for v in value)
    # What the renderers would print for any other object (an exception, a path), redacted.
    return redact(repr(value))


def _redacted_thread_excepthook(args: threading.ExceptHookArgs) -> None:
    # A thread's uncaught exception is printed by threading.excepthook, not sys.excepthook.
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    sys.stderr.write(f"Exception in thread {name}:\n")
    _redacted_excepthook(args.exc_type, args.exc_value or args.exc_type(), args.exc_traceback)


def _redacted_excepthook(
    kind: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    sys.stderr.write(redact("".join(traceback.format_exception(kind, exc, tb))))


def get_logger(**context: object) -> Logger:
    """A logger with ``context`` bound to every event it logs."""
    logger: Logger = structlog.get_logger().bind(**context)
    return logger
