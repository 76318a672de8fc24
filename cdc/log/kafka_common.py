"""What the Kafka log's modules share: client settings and the translation of librdkafka errors.

librdkafka reports errors as :class:`confluent_kafka.KafkaException` wrapping a ``KafkaError``
that says whether retrying can help. This module is the one place that maps them onto the
framework's errors: fatal ones (and a fenced producer) become :class:`~cdc.errors.LogFatal`,
everything else :class:`~cdc.errors.LogUnavailable`, which the runtime retries with backoff.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from cdc.config import KafkaLogConfig
from cdc.errors import LogFatal, LogUnavailable

#: Errors that no retry can cure: a bad setting, a missing permission.
_NOT_RETRIABLE = {
    KafkaError.INVALID_REPLICATION_FACTOR,
    KafkaError.INVALID_PARTITIONS,
    KafkaError.INVALID_CONFIG,
    KafkaError.POLICY_VIOLATION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._INVALID_ARG,
}

FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED}

#: Sent with every client so broker logs and quotas can tell our clients apart.
CLIENT_ID = "cdc"


def client_config(config: KafkaLogConfig, **settings: Any) -> dict[str, Any]:
    """librdkafka settings for one client: ours, then the user's ``properties`` on top."""
    return {
        "bootstrap.servers": config.bootstrap_servers,
        "client.id": CLIENT_ID,
        # Refused connections are reported through our errors; librdkafka's own lines are noise.
        "log_level": 2,
        **settings,
        **config.properties,
    }


def producer_config(config: KafkaLogConfig) -> dict[str, Any]:
    """Settings of a transactional producer (without its ``transactional.id``)."""
    timeout_ms = config.transaction_timeout_ms
    settings = client_config(
        config,
        **{
            "enable.idempotence": True,
            "acks": "all",
            "transaction.timeout.ms": timeout_ms,
            # A delivery may not outlive its transaction (librdkafka insists).
            "message.timeout.ms": timeout_ms,
            "linger.ms": 5,
            "compression.type": "lz4",
            # Bounded memory: produce() waits for deliveries once this much is queued.
            "queue.buffering.max.kbytes": 65_536,
            "queue.buffering.max.messages": 100_000,
        },
    )
    # After the user's properties: placement is a contract (partition_for, Java clients).
    return {**settings, "partitioner": "murmur2_random"}


def reader_config(config: KafkaLogConfig, pipeline: str) -> dict[str, Any]:
    """Settings of the group-less partition reader (read_committed)."""
    return client_config(
        config,
        **{
            "group.id": f"cdc-{pipeline}-reader",  # never joins nor commits
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
            "queued.max.messages.kbytes": 16_384,
        },
    )


def error_of(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` inside a ``KafkaException`` (``None`` for anything else)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def describe(err: KafkaError | None, exc: BaseException) -> str:
    """``NAME: message`` of a librdkafka error, for messages people read."""
    return f"{err.name()}: {err.str()}" if err is not None else str(exc)


def translate(exc: BaseException, doing: str, servers: str) -> LogFatal | LogUnavailable:
    """The framework error for a librdkafka failure while ``doing`` something."""
    err = error_of(exc)
    message = f"kafka log ({servers}): {doing} failed: {describe(err, exc)}"
    if err is not None and (err.fatal() or err.code() in _NOT_RETRIABLE | FENCED):
        return LogFatal(message)
    return LogUnavailable(message)


@contextmanager
def translated(doing: str, servers: str) -> Iterator[None]:
    """Re-raise librdkafka failures inside the block as framework errors."""
    try:
        yield
    except KafkaException as exc:
        raise translate(exc, doing, servers) from exc
