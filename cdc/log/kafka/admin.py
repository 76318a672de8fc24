"""The Kafka log's cluster operations through the AdminClient: metadata, topic creation and
configs, offsets (read_committed), consumer groups.

Requests that fail while a leader moves (a topic just created, a broker restarting) are tried
again for a few seconds before the failure is reported.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, untyped
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from cdc.config.models import KafkaLogConfig
from cdc.contracts.errors import LogError, LogUnavailable
from cdc.log.base import TopicPartition
from cdc.log.kafka.brokerless import RenewedClient
from cdc.log.kafka.common import client_config, describe, error_of, translate, translated
from cdc.log.kafka.groups import GroupDescription, described
from cdc.support.retry import Backoff, retry
from cdc.support.wait import WaitTimeout, wait_until

TIMEOUT_S = 15.0
_GROUP_OFFSETS_TOPIC = "__consumer_offsets"
_VISIBLE_WAIT_S = 5.0
EARLIEST = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
LATEST = OffsetSpec.latest()  # type: ignore[no-untyped-call]


class KafkaAdmin:
    """An AdminClient with the framework's errors and a cache of topic partition counts.

    Raises:
        LogUnavailable: no broker answered within ``config.connect_timeout_s``.
    """

    def __init__(self, config: KafkaLogConfig) -> None:
        self.servers = config.bootstrap_servers
        self._config = config
        self._renewed = RenewedClient(AdminClient, client_config(config), "admin")
        self._known: dict[str, int] = {}  # topic -> partitions, from the last metadata
        # group -> the consumer that reads its committed offsets (see committed()), kept open,
        # with the lock held around each use of it and its close: librdkafka's handle must not
        # be destroyed while another thread waits in a call on it
        self._offset_readers: dict[str, tuple[RenewedClient[Consumer], threading.Lock]] = {}
        self._readers_lock = threading.Lock()
        self._closed = False
        timeout = config.connect_timeout_s
        try:
            self._remember(self._admin.list_topics(timeout=timeout))
        except KafkaException as exc:
            raise LogUnavailable(
                f"kafka log: cannot reach the brokers at {self.servers} within {timeout:.0f} s "
                f"({describe(error_of(exc), exc)}); check log.bootstrap_servers and that Kafka "
                "is up"
            ) from exc

    @property
    def _admin(self) -> Any:
        """The AdminClient, renewed first if it knows no broker.

        Raises:
            LogError: the admin is closed.
        """
        return self._renewed.current()

    def partitions(self, refresh: bool = False) -> dict[str, int]:
        """Partition count of every topic (``refresh``: ask the cluster, else the cache)."""
        if refresh:
            with translated("reading cluster metadata", self.servers):
                self._remember(self._admin.list_topics(timeout=TIMEOUT_S))
        return self._known

    def count(self, topic: str) -> int | None:
        """The topic's partition count, ``None`` if it does not exist."""
        return self._known.get(topic) or self.partitions(refresh=True).get(topic)

    def create(self, names: list[str], partitions: int, rf: int, config: dict[str, str]) -> None:
        """Create topics (one that exists meanwhile is fine), then wait for their leaders."""
        if not names:
            return
        new = [NewTopic(name, partitions, rf, config=config) for name in names]
        with translated(f"creating topics {', '.join(names)}", self.servers):
            futures = self._admin.create_topics(new, request_timeout=TIMEOUT_S)
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                err = error_of(exc)
                if err is None or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise translate(exc, f"creating topic {name}", self.servers) from exc
        self._wait_for_leaders(names)

    def configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        """Each topic's effective configuration."""
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in topics]
        with translated("describing topic configs", self.servers):
            futures = self._admin.describe_configs(resources, request_timeout=TIMEOUT_S)
            return {
                resource.name: {
                    k: v.value for k, v in future.result().items() if v.value is not None
                }
                for resource, future in futures.items()
            }

    def offsets(self, counts: dict[str, int], spec: Any) -> dict[str, dict[int, int]]:
        """``EARLIEST`` or ``LATEST`` (last stable) offset of every partition of ``counts``."""
        request = {KafkaPartition(t, p): spec for t, n in counts.items() for p in range(n)}

        def attempt() -> dict[str, dict[int, int]]:
            out: dict[str, dict[int, int]] = {topic: {} for topic in counts}
            for tp, future in self._list_offsets(request, TIMEOUT_S).items():
                out[tp.topic][tp.partition] = future.result().offset
            return out

        try:
            result: dict[str, dict[int, int]] = self._retrying(attempt)
        except KafkaException as exc:
            raise translate(exc, "listing offsets", self.servers) from exc
        return result

    def wait_visible(self, last: dict[tuple[str, int], int]) -> None:
        """Wait (briefly) until read_committed readers get past each partition's ``last`` offset.

        The broker writes a transaction's markers after answering the commit; waiting for them
        gives "visible on return", as the embedded log has.
        """
        pending = dict(last)

        def visible() -> bool:
            request = {KafkaPartition(t, p): LATEST for t, p in pending}
            for tp, future in self._list_offsets(request, _VISIBLE_WAIT_S).items():
                if future.result().offset > pending[tp.topic, tp.partition]:
                    del pending[tp.topic, tp.partition]
            return not pending

        if not pending:
            return
        # Each error leaves the commit durable; only its visibility is late (LogError: the log
        # was closed meanwhile, a stop racing the commit's caller).
        with contextlib.suppress(KafkaException, WaitTimeout, LogError):
            wait_until(visible, _VISIBLE_WAIT_S, 0.002, describe="the commit markers")

    def committed(self, group: str) -> dict[TopicPartition, int]:
        """The group's committed next offsets (partitions without a commit are left out).

        Asked through a consumer that never joins the group, not the AdminClient: its
        ``list_consumer_group_offsets`` crashes (SIGSEGV, confluent-kafka 2.16) while a new
        broker's group coordinator is still loading, where the consumer simply waits. The
        consumer is kept for the group's next call until :meth:`close`: a new one finds the
        group coordinator before it asks (some 60 ms a call, against under 1 ms on a kept one),
        and a fence or a sink's consistency tracker asks again and again.

        Raises:
            LogError: the admin is closed.
        """
        counts = {t: n for t, n in self.partitions(refresh=True).items() if not t.startswith("__")}
        if _GROUP_OFFSETS_TOPIC not in self._known or not counts:
            return {}  # no group ever committed anything
        partitions = [KafkaPartition(t, p) for t, n in counts.items() for p in range(n)]
        reader, in_use = self._offsets_reader(group)
        try:
            with in_use:
                if self._closed:
                    raise RuntimeError("the log is closed")
                found = self._retrying(
                    lambda: reader.current().committed(partitions, timeout=TIMEOUT_S)
                )
        except KafkaException as exc:
            raise translate(exc, f"reading the offsets of group {group}", self.servers) from exc
        except RuntimeError as exc:  # closed meanwhile: by close(), or renewed on another thread
            raise LogUnavailable(
                f"kafka log ({self.servers}): reading the offsets of group {group}: {exc}"
            ) from exc
        return {TopicPartition(p.topic, p.partition): p.offset for p in found if p.offset >= 0}

    def _offsets_reader(self, group: str) -> tuple[RenewedClient[Consumer], threading.Lock]:
        """The group's kept offsets reader, made at its first use (renewed once it knows no
        broker, as the admin client is: see :mod:`cdc.log.kafka.brokerless`)."""
        with self._readers_lock:
            if self._closed:
                raise LogError("kafka log: the log is closed")
            kept = self._offset_readers.get(group)
            if kept is None:
                config = client_config(
                    self._config, **{"group.id": group, "enable.auto.commit": False}
                )
                kept = RenewedClient(Consumer, config, "offsets_reader"), threading.Lock()
                self._offset_readers[group] = kept
            return kept

    def close(self) -> None:
        """Close the kept offsets readers (they never joined their groups: nothing to leave)
        and let the AdminClient go, so that every librdkafka client of this admin is destroyed,
        threads and all, on return; a later request raises ``LogError``."""
        with self._readers_lock:
            self._closed = True
            readers, self._offset_readers = list(self._offset_readers.values()), {}
        for reader, in_use in readers:
            with in_use:  # after a call in progress on it returned
                reader.close()
        self._renewed.close()

    @staticmethod
    def _retrying(request: Callable[[], Any]) -> Any:
        """``request()``, again while it fails for a moving leader or coordinator."""
        return retry(request, _moving, Backoff.fixed(0.1), within_s=TIMEOUT_S)

    def groups(self) -> list[str]:
        """Every consumer group the cluster knows, sorted."""
        with translated("listing consumer groups", self.servers):
            result = self._admin.list_consumer_groups(request_timeout=TIMEOUT_S).result()
        return sorted(g.group_id for g in result.valid)

    def describe_group(self, group: str) -> GroupDescription:
        """The group's state and members with their partitions (none: it never had any).

        Not asked before the cluster has a group coordinator (``__consumer_offsets``): asking
        would create it, and the AdminClient's group requests are the ones that crash while it
        loads (see :meth:`committed`).
        """
        if _GROUP_OFFSETS_TOPIC not in self.partitions(refresh=True):
            return GroupDescription(group, "Dead", ())

        def attempt() -> GroupDescription:
            futures = self._admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)
            return described(futures[group].result())

        try:
            result: GroupDescription = self._retrying(attempt)
        except KafkaException as exc:
            raise translate(exc, f"describing consumer group {group}", self.servers) from exc
        return result

    def _list_offsets(self, request: dict[Any, Any], timeout_s: float) -> dict[Any, Any]:
        futures: dict[Any, Any] = self._admin.list_offsets(
            request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s
        )
        return futures

    def _wait_for_leaders(self, names: list[str]) -> None:
        """Wait until every partition of ``names`` has a leader: until then, requests fail."""

        def led() -> bool:
            with translated("reading cluster metadata", self.servers):
                metadata = self._admin.list_topics(timeout=TIMEOUT_S)
            self._remember(metadata)
            topics = [metadata.topics.get(name) for name in names]
            return all(
                t is not None
                and t.error is None
                and all(p.leader >= 0 for p in t.partitions.values())
                for t in topics
            )

        try:
            wait_until(led, TIMEOUT_S, 0.05)
        except WaitTimeout:
            raise LogUnavailable(
                f"kafka log ({self.servers}): topics {names} have no leader"
            ) from None

    def _remember(self, metadata: Any) -> None:
        self._known = {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }


def _moving(exc: Exception) -> bool:
    """A Kafka error that a moving leader or coordinator explains: not fatal, may heal."""
    if not isinstance(exc, KafkaException):
        return False
    err = error_of(exc)
    return err is not None and not err.fatal()
