"""The first start checks its sinks before the source creates anything.

A source's first start leaves objects behind on the source server (PostgreSQL: a replication
slot, which pins WAL until it is dropped, and a publication). If a sink cannot start at all (a
path that can never be created, a file that is not a database), the pipeline stops anyway, so
the sinks are opened once, and closed, before the source task runs: a sink that fails for good
then stops the start with nothing created on the source. A sink that is only unavailable for
now (a server restarting, a lock held) does not hold the source back; its task retries it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

from cdc.contracts.errors import CdcError, SinkFatal
from cdc.contracts.sink import Sink
from cdc.log.base import Log
from cdc.support.logging import Logger
from cdc.support.retry import Decision, classify


class SinkCannotStart(SinkFatal):
    """A sink failed for good at the first start, before the source created anything.

    Attributes:
        sink: the sink's name.
    """

    def __init__(self, sink: str, error: BaseException) -> None:
        super().__init__(
            f"sink {sink!r} cannot start: {error} (checked before the source's first start, "
            "so nothing was created on the source yet)"
        )
        self.sink = sink


def is_first_start(log: Log) -> bool:
    """True when the log holds no source offsets: the source has never committed anything.

    A log that cannot be read right now counts as not first (the tasks retry it themselves).
    """
    try:
        return not log.source_offsets()
    except CdcError:
        return False


def check_sinks(factories: Mapping[str, Callable[[], Sink]], logger: Logger) -> None:
    """Open and close each sink once.

    Args:
        factories: each sink's factory, by sink name.
        logger: bound to the pipeline.

    Raises:
        SinkCannotStart: a sink's open failed with an error that retrying cannot fix.
    """
    for name, factory in factories.items():
        try:
            sink = factory()
            try:
                sink.open()
            finally:
                with contextlib.suppress(Exception):
                    sink.close()
        except Exception as exc:
            if classify(exc) is Decision.RETRY:
                logger.info("preflight.sink_unavailable", sink=name, error=str(exc))
                continue
            raise SinkCannotStart(name, exc) from exc
        logger.debug("preflight.sink_ok", sink=name)
