"""Open the log a pipeline file names."""

from __future__ import annotations

from cdc.config.models import EmbeddedLogConfig
from cdc.config.pipeline import Pipeline
from cdc.log.base import Log


def open_log(pipeline: Pipeline) -> Log:
    """The pipeline's log: embedded (default) or Kafka, with the same semantics."""
    config = pipeline.log
    if isinstance(config, EmbeddedLogConfig):
        from cdc.log.embedded import EmbeddedLog, appender

        embedded = EmbeddedLog(
            pipeline.log_path(),
            partitions=config.partitions,
            durability=config.durability,
            tombstone_retention_ms=config.tombstone_retention_ms,
        )
        # Here, not in EmbeddedLog: a command has configured logging by now (to stderr), while
        # a library user's unconfigured structlog would print to stdout.
        appender.announce()
        return embedded
    from cdc.log.kafka import KafkaLog  # type: ignore[import-not-found,unused-ignore]

    log: Log = KafkaLog(pipeline.name, config, pipeline.state_path())
    return log
