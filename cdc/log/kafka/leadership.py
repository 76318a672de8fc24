"""Leadership of a single-writer sink or live join view, leased through a Kafka consumer group.

A sink whose store has one writer (a DuckDB file, a Tantivy index, an Iceberg table: its plugin
sets ``single_writer``) may have several ``cdc sink``
workers, but only one may open the store. Each worker joins the group
``<pipeline>.sink.<sink>.leader``, subscribed to the one-partition topic ``<pipeline>.__leader``
(which holds no records): the member the coordinator gives partition 0 *leads*, and the others
stand by. Kafka then does what a lease needs:

- A leader that dies stops heartbeating; after ``session_timeout_ms`` the coordinator removes it
  and gives partition 0 to a standby.
- The ``cooperative-sticky`` assignor keeps partition 0 where it is when members come and go: a
  standby that joins does not take leadership from a healthy leader.
- When partition 0 is taken away (a rebalance revokes it, or the session was lost), the
  ``on_lost`` callback runs inside :meth:`KafkaLease.renew`, before this member rejoins: the
  runtime stops its sink there and returns only once the store is closed. A revocation thus
  completes, and the partition reaches another member, only after the old leader closed.

What a lease cannot do is fence a leader that is paused (a stopped process, a frozen VM) or cut
off from Kafka past ``session_timeout_ms``: the group moves on without it, and it learns so only
when it runs again (librdkafka calls ``on_lost``). It then stops, but the batch it held may be
written meanwhile. The fence against that is the store's, not the lease's: DuckDB's file lock,
Tantivy's writer lock (the new leader's open is retried until the old one closed: one host, not
NFS); for Iceberg, the catalog's commit check (a commit on a stale snapshot fails, and the loser
reloads the tables' offsets). Their stored offsets and per-key positions make a late batch
harmless.

A live join view (:mod:`cdc.views.standby`) is leased the same way, in the group
``<pipeline>.view.<view>.leader``: its state is one process's local store, so one process may
run it. Its fence against a paused leader is its transactions' id, ``cdc-<pipeline>.view.<view>``,
which each term claims (:meth:`cdc.log.kafka.log.KafkaLog.claim_writer`) before it checks its
store: the paused leader's commit then fails as fenced.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException

from cdc.config.models import KafkaLogConfig
from cdc.log.base import TopicPartition
from cdc.log.kafka.admin import KafkaAdmin
from cdc.log.kafka.common import ConnectionWatch, client_config, translated
from cdc.support.logging import get_logger

_logger = get_logger(component="kafka_log")


def leader_topic(pipeline: str) -> str:
    """The one-partition topic every single-writer sink's lease group subscribes to."""
    return f"{pipeline}.__leader"


def lease_group(pipeline: str, sink: str) -> str:
    """The consumer group whose owner of partition 0 leads ``sink``."""
    return f"{pipeline}.sink.{sink}.leader"


def view_lease_group(pipeline: str, view: str) -> str:
    """The consumer group whose owner of partition 0 runs live join view ``view``."""
    return f"{pipeline}.view.{view}.leader"


def worker_id() -> str:
    """This process as other workers and ``cdc status`` name it: ``cdc-<host>-<pid>``, the
    lease member's ``client.id`` (only the characters Kafka takes in one)."""
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())
    return f"cdc-{host}-{os.getpid()}"


class KafkaLease:
    """This worker's membership of a sink's lease group; :attr:`held` while it leads.

    Args:
        config: the pipeline's Kafka log settings (``session_timeout_ms`` is the lease's).
        pipeline: the pipeline's name.
        sink: the sink's name.
        on_lost: called inside :meth:`renew` when leadership is taken away, before this member
            rejoins the group; it must return only once the sink's store is closed.
        group: the lease group (default: the sink's, :func:`lease_group`; a view's is
            :func:`view_lease_group`).

    Raises:
        LogUnavailable: no broker answered.
        LogFatal: the broker refused the group or the topic.
    """

    def __init__(
        self,
        config: KafkaLogConfig,
        pipeline: str,
        sink: str,
        on_lost: Callable[[], None],
        group: str | None = None,
    ) -> None:
        self.group = group or lease_group(pipeline, sink)
        self.topic = leader_topic(pipeline)
        self.held = False
        self._on_lost = on_lost
        self._config = config
        self._admin = KafkaAdmin(config)
        try:
            # One partition: the lease; compacted like every topic of the log, and it stays empty.
            compacted = {"cleanup.policy": "compact"}
            self._admin.create([self.topic], 1, config.replication_factor, compacted)
            self._watch = ConnectionWatch("lease", group=self.group)
            self._consumer = self._join()
        except BaseException:
            # A join that failed (a broker down) is retried by the caller for as long as it
            # lasts: each attempt's admin client, with its librdkafka threads, goes now.
            self._admin.close()
            raise

    def _join(self) -> Any:
        timeout_ms = self._config.session_timeout_ms
        settings = client_config(
            self._config,
            **{
                "client.id": worker_id(),
                "group.id": self.group,
                "partition.assignment.strategy": "cooperative-sticky",
                "enable.auto.commit": False,
                "auto.offset.reset": "latest",
                "session.timeout.ms": timeout_ms,
                "heartbeat.interval.ms": max(300, timeout_ms // 5),
                **self._watch.settings(),
            },
        )
        with translated("joining the lease group", self._config.bootstrap_servers):
            consumer = Consumer(settings)
            consumer.subscribe(
                [self.topic], on_assign=self._assigned, on_revoke=self._taken, on_lost=self._taken
            )
        return consumer

    def renew(self, timeout_s: float) -> None:
        """Serve the membership for up to ``timeout_s``: heartbeats go on in librdkafka's own
        thread, but a member that is not served within ``max.poll.interval.ms`` leaves the
        group, and the assignment callbacks run only in here."""
        with translated("serving the lease group", self._config.bootstrap_servers):
            self._consumer.poll(timeout_s)

    def leader(self) -> str | None:
        """Who leads now, as the coordinator says: ``<client id> at <host>`` (``None``: no
        member holds the lease, or the coordinator could not be asked)."""
        try:
            found = self._admin.describe_group(self.group)
        except Exception:  # best effort: only a log line and a status field use it
            return None
        owner = found.owners().get(TopicPartition(self.topic, 0))
        member = next((m for m in found.members if m.member_id == owner), None)
        return None if member is None else f"{member.client_id} at {member.host}"

    def close(self) -> None:
        """Leave the group: the lease moves to a standby at once (the store must be closed).
        Then the admin client goes too, so no librdkafka client of the lease outlives it."""
        self.held = False  # let go on purpose: the revocation that closing runs is no loss
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            _logger.warning("kafka.lease_close_failed", group=self.group, error=str(exc))
        finally:
            self._admin.close()

    def _assigned(self, _consumer: Any, partitions: list[Any]) -> None:
        if any(p.topic == self.topic and p.partition == 0 for p in partitions):
            self.held = True

    def _taken(self, _consumer: Any, partitions: list[Any]) -> None:
        """Revoked or lost: stop the sink before librdkafka lets the group go on."""
        if self.held and any(p.topic == self.topic and p.partition == 0 for p in partitions):
            self.held = False
            self._on_lost()
