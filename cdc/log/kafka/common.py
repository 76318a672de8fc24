"""What the Kafka log's modules share: client settings and the translation of librdkafka errors.

librdkafka reports errors as :class:`confluent_kafka.KafkaException` wrapping a ``KafkaError``
that says whether retrying can help. This module is the one place that maps them onto the
framework's errors: fatal ones (and a fenced producer) become
:class:`~cdc.contracts.errors.LogFatal`, everything else
:class:`~cdc.contracts.errors.LogUnavailable`, which the runtime retries with backoff.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from cdc.config.models import KafkaLogConfig
from cdc.contracts.errors import LogFatal, LogUnavailable
from cdc.support.logging import get_logger

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
#: The record header that holds a record's source position (:attr:`cdc.log.base.Record.pos`):
#: beside the value, so a Debezium consumer reads Debezium's bytes.
POS_HEADER = "cdc.pos"
#: The key of a record without one on Kafka: a broker refuses a keyless record on a compacted
#: topic, so a truncate (the one record without a key) is keyed ``{}``, where the embedded log
#: keeps its null.
TRUNCATE_KEY = b"{}"
UNASSIGNED = -1  # librdkafka's RD_KAFKA_PARTITION_UA: its configured partitioner decides

#: What librdkafka's error callback reports for a lost connection: one broker refused or
#: dropped it, or none answers.
CONNECTION_LOST = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}

#: After a restored connection, failed attempts librdkafka queued during the outage can still
#: arrive for a moment: single ``_TRANSPORT`` errors this soon do not start a new outage.
RECONNECT_SETTLE_S = 5.0

_logger = get_logger(component="kafka_log")


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


class ConnectionWatch:
    """Logs one client's lost and restored connection to the cluster, once per outage.

    librdkafka reconnects by itself and says nothing when it did: it reports trouble through
    the ``error_cb`` setting (:meth:`on_error`), a ``_TRANSPORT`` error for every failed attempt
    and ``_ALL_BROKERS_DOWN`` when none answers. So the first such error logs
    ``kafka.connection_lost``, and the next call of ours that reached the cluster
    (:meth:`reached`) logs ``kafka.connection_restored`` with how long it was down. Errors
    are delivered when the client is next served, so some arrive late: a ``_TRANSPORT`` error
    just after a restore is one of those (:data:`RECONNECT_SETTLE_S`).

    Args:
        client: which client (``producer``, ``consumer``).
        context: fields for every event (the group, the transactional id).
    """

    def __init__(self, client: str, **context: Any) -> None:
        self._logger = _logger.bind(client=client, **context)
        self._lost_at: float | None = None
        self._restored_at = float("-inf")

    @property
    def lost(self) -> bool:
        """A lost connection was logged and nothing reached the cluster since."""
        return self._lost_at is not None

    def on_error(self, err: KafkaError) -> None:
        """librdkafka's ``error_cb``; it must not raise (it runs inside librdkafka's calls)."""
        try:
            code, now = err.code(), time.monotonic()
            if code not in CONNECTION_LOST:
                self._logger.warning("kafka.client_error", error=err.name(), detail=err.str())
            elif self._lost_at is None:
                if code == KafkaError._TRANSPORT and now - self._restored_at < RECONNECT_SETTLE_S:
                    return
                self._lost_at = now
                self._logger.warning("kafka.connection_lost", error=err.name(), detail=err.str())
        except Exception:  # a logging failure must not break the client
            pass

    def reached(self, since: float | None = None) -> None:
        """A call reached the cluster: the connection is back, if it was lost.

        Args:
            since: when (``time.monotonic()``) the call that was answered was made. An answer
                to a call made before the loss was noticed proves nothing: a commit answered
                just as the broker went away. ``None``: the answer itself is the proof.
        """
        lost_at = self._lost_at
        if lost_at is not None and (since is None or since >= lost_at):
            self._lost_at = None
            self._restored_at = time.monotonic()
            self._logger.info(
                "kafka.connection_restored", down_s=round(time.monotonic() - lost_at, 1)
            )

    def settings(self) -> dict[str, Any]:
        """The client settings that route librdkafka's errors here."""
        return {"error_cb": self.on_error}
