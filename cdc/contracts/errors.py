"""One error root, behaviour by mixin.

Plugins translate driver errors at their boundary (``raise SomeCdcError(...) from exc``); the
runtime decides what to do in exactly one place (:func:`cdc.support.retry.classify`).
"""

from __future__ import annotations

from cdc.support.redact import redact


class CdcError(Exception):
    """Root of every error this framework raises on purpose.

    Its message is redacted (:func:`cdc.support.redact.redact`) as it is made: an error's text
    reaches logs, ``cdc status`` and stored state (a failed request's reason), so a DSN a message
    quotes must lose its secrets before any of them sees it.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(arg) if isinstance(arg, str) else arg for arg in args))


class Retriable:
    """Mixin: the operation may succeed if tried again later (a server restarting, a lock)."""


class Fatal:
    """Mixin: retrying cannot help; the pipeline stops with this error's message."""


class Skippable:
    """Mixin: one record cannot be applied; the pipeline's error policy decides (fail or DLQ)."""


class ConfigError(CdcError, Fatal):
    """The pipeline file is invalid. ``problems`` holds every ``(yaml path, message)`` pair."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        lines = [f"{path}: {message}" if path else message for path, message in problems]
        super().__init__("invalid pipeline file:\n  " + "\n  ".join(lines))


class PluginNotFound(CdcError, Fatal):
    """No installed plugin answers to the configured ``type``."""


class SourceError(CdcError):
    """A problem reading from the source database."""


class SourceUnavailable(SourceError, Retriable):
    """The source is down or unreachable for now; reconnect with backoff."""


class SourceFatal(SourceError, Fatal):
    """The source cannot continue (bad credentials, lost slot, missing table...)."""


class SourceMisconfigured(SourceFatal):
    """The pipeline file asks what this database cannot do, found only once connected (a row
    filter the server refuses, a key column a filter leaves out): a config error, exit 2."""


class SinkError(CdcError):
    """A problem writing to a sink."""


class SinkUnavailable(SinkError, Retriable):
    """The sink is down or refusing writes for now: back off and try the same batch again."""


class BackpressureError(SinkUnavailable):
    """The sink is saturated; the runner waits and retries the same batch."""


class SinkFatal(SinkError, Fatal):
    """The sink cannot continue (an incompatible schema change, bad credentials...)."""


class SinkDataLost(SinkFatal):
    """The sink's store lost what it held (a cache restarted without persistence, flushed, or
    failed over to an empty replica). The sink task rebuilds it from the log and goes on; a
    runner that cannot stops the sink with this message."""


class RecordError(CdcError, Skippable):
    """One record cannot be converted or applied; carries the reason for a dead-letter entry.

    A sink sets ``record`` to the offending record so the runner can dead-letter exactly it.
    """

    def __init__(self, reason: str, record: object | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.record = record


class LogError(CdcError):
    """A problem with the log (embedded store or Kafka)."""


class LogUnavailable(LogError, Retriable):
    """The log cannot take writes for now (broker down, database locked)."""


class LogFatal(LogError, Fatal):
    """The log is unusable (fenced producer, corrupt store)."""


class RecordTooLarge(LogError, Skippable):
    """The log refused one record for its size."""
