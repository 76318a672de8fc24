"""The Kafka log: the pipeline's topics on Apache Kafka, through confluent-kafka (librdkafka).

Same semantics as the embedded log, with Kafka's mechanisms:

- Topics are created compacted (``cleanup.policy=compact``, ``min.compaction.lag.ms``,
  ``delete.retention.ms``) with the configured partitions and replication factor; existing
  topics are left as they are.
- Records of one key go to ``murmur2(key) % partitions`` (Java's default partitioner). The
  partition is passed explicitly and the producer's ``partitioner`` is ``murmur2_random`` too,
  so both agree; a record without a key goes to partition 0, as in the embedded log.
- Records and source offsets commit in one Kafka transaction. Source offsets are JSON records
  of the compacted topic ``<pipeline>.__offsets`` (one partition), as in Kafka Connect.
- Readers use ``read_committed``. Offsets are Kafka's: transaction markers take offsets too,
  so a partition's offsets have gaps, and ``record_count`` counts markers (an estimate).

Which producer a transaction uses: the thread that reads the source offsets (the runtime's
source task, before every session) writes with ``transactional.id = cdc-<pipeline>``, so a
second, zombie instance of the source is fenced. Transactions begun on other threads (a sink
worker's dead letters, tools) use an id unique to this log instance: a sinks-only worker must
never fence the pipeline's source on another host.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, untyped
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from cdc.config import KafkaLogConfig
from cdc.errors import LogError, LogUnavailable, RecordTooLarge
from cdc.log.base import (
    PartitionsCallback,
    Record,
    StartOffsets,
    StoredRecord,
    TopicInfo,
    TopicPartition,
)
from cdc.log.kafka_common import client_config, error_of, translate, translated
from cdc.log.kafka_consumer import KafkaConsumer, PartitionReader
from cdc.log.kafka_txn import KafkaTransaction, TransactionalWriter
from cdc.partitioner import partition_for

#: librdkafka's default ``message.max.bytes``: the client refuses larger records itself.
CLIENT_MAX_BYTES = 1_000_000
#: Room for the record batch's own header and the record's framing.
_FRAMING_BYTES = 128
_ADMIN_TIMEOUT_S = 15.0
_VISIBLE_WAIT_S = 5.0
_EARLIEST = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
_LATEST = OffsetSpec.latest()  # type: ignore[no-untyped-call]

Prepared = tuple[str, int, bytes | None, bytes | None]


class KafkaLog:
    """A :class:`~cdc.log.base.Log` on a Kafka cluster.

    Args:
        pipeline: the pipeline name (offsets topic, transactional id, reader group).
        config: the pipeline file's ``log`` section.

    Raises:
        LogUnavailable: no broker answered within ``config.connect_timeout_s``.
    """

    def __init__(self, pipeline: str, config: KafkaLogConfig) -> None:
        self.pipeline = pipeline
        self.config = config
        self.servers = config.bootstrap_servers
        self.offsets_topic = f"{pipeline}.__offsets"
        self._admin = AdminClient(client_config(config))
        self._known: dict[str, int] = {}  # topic -> partitions, from the last metadata
        self._topics: dict[str, tuple[int, int]] = {}  # topic -> (partitions, max message bytes)
        self._lock = threading.Lock()
        self._source_thread: int | None = None
        self._writers: dict[str, TransactionalWriter] = {}
        self._reader: PartitionReader | None = None
        self._offsets_topic_ready = False
        self.closed = False
        self._check_reachable()

    # -- writing -------------------------------------------------------------------------------

    def ensure_topics(self, names: Sequence[str]) -> None:
        """Create missing topics compacted, with the configured partitions and replicas."""
        missing = [n for n in dict.fromkeys(names) if n not in self._metadata(refresh=True)]
        self._create(missing, self.config.partitions)

    def partition_for(self, topic: str, key: bytes | None) -> int:
        """``murmur2(key) % partitions`` of the topic (not created yet: the configured count)."""
        count = self._metadata().get(topic) or self._metadata(refresh=True).get(topic)
        return partition_for(key, count or self.config.partitions)

    def begin(self) -> KafkaTransaction:
        """Start a transaction (waits while another thread's transaction holds the producer)."""
        self._ensure_offsets_topic()
        source = threading.get_ident() == self._source_thread
        return KafkaTransaction(self, self._writer("source" if source else "other"))

    def source_offsets(self) -> dict[str, Any]:
        """The last value of each key of the offsets topic, read to its end (read_committed).

        The calling thread becomes the source writer (see the module docstring).
        """
        self._source_thread = threading.get_ident()
        self._ensure_offsets_topic()
        offsets: dict[str, Any] = {}
        for record in self._read_to_end(self.offsets_topic, 0):
            key = (record.key or b"").decode()
            if record.value is None:
                offsets.pop(key, None)
            else:
                offsets[key] = orjson.loads(record.value)
        return offsets

    # -- reading -------------------------------------------------------------------------------

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        start_offsets: StartOffsets | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> KafkaConsumer:
        """Join consumer group ``group`` (``read_committed``, manual commits)."""
        self.ensure_topics(topics)
        settings = client_config(
            self.config,
            **{
                "group.id": group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": self.config.session_timeout_ms,
                "heartbeat.interval.ms": max(500, self.config.session_timeout_ms // 5),
            },
        )
        with translated("joining a consumer group", self.servers):
            return KafkaConsumer(settings, topics, start_offsets, on_revoke)

    def read(self, topic: str, partition: int, offset: int, max_records: int) -> list[StoredRecord]:
        """Committed records of one partition from ``offset`` on (no consumer group involved).

        Raises:
            LogError: the topic or partition does not exist.
        """
        end = self.end_offsets(topic)
        if partition not in end:
            raise LogError(f"kafka log: topic {topic!r} has no partition {partition}")
        return self._partition_reader().read(topic, partition, offset, max_records, end[partition])

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's last stable offset: the next offset a read_committed reader gets."""
        count = self._metadata().get(topic) or self._metadata(refresh=True).get(topic)
        if count is None:
            raise LogError(f"kafka log: unknown topic {topic!r}")
        return self._list_offsets({topic: count}, _LATEST)[topic]

    def topics(self) -> list[TopicInfo]:
        """Every topic but Kafka's internal ones, with configs and offsets.

        ``record_count`` is ``end - start`` summed over partitions: an estimate that counts
        transaction markers and records compaction has not removed yet.
        """
        counts = {
            name: count
            for name, count in self._metadata(refresh=True).items()
            if not name.startswith("__")
        }
        if not counts:
            return []
        configs = self._describe_configs(list(counts))
        starts = self._list_offsets(counts, _EARLIEST)
        ends = self._list_offsets(counts, _LATEST)
        return [
            TopicInfo(
                name,
                counts[name],
                configs[name],
                starts[name],
                ends[name],
                sum(ends[name].values()) - sum(starts[name].values()),
            )
            for name in sorted(counts)
        ]

    def committed_offsets(self, group: str) -> dict[TopicPartition, int]:
        """The group's committed next offsets (partitions without a commit are left out)."""
        request = [ConsumerGroupTopicPartitions(group)]
        with translated(f"reading the offsets of group {group}", self.servers):
            futures = self._admin.list_consumer_group_offsets(
                request, request_timeout=_ADMIN_TIMEOUT_S
            )
            result = futures[group].result()
        return {
            TopicPartition(p.topic, p.partition): p.offset
            for p in result.topic_partitions or []
            if p.offset >= 0
        }

    def groups(self) -> list[str]:
        """Every consumer group the cluster knows, sorted."""
        with translated("listing consumer groups", self.servers):
            result = self._admin.list_consumer_groups(request_timeout=_ADMIN_TIMEOUT_S).result()
        return sorted(g.group_id for g in result.valid)

    def latest_value(self, topic: str, key: bytes) -> bytes | None:
        """Kafka cannot look keys up.

        Raises:
            NotImplementedError: always; callers fall back (the PostgreSQL source reads the row).
        """
        raise NotImplementedError("the Kafka log cannot look up a key's latest value")

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the producers and the reader. Stop using the log's consumers first."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            writers, self._writers = list(self._writers.values()), {}
            reader, self._reader = self._reader, None
        for writer in writers:
            writer.close()
        if reader is not None:
            reader.close()

    def __enter__(self) -> KafkaLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- for the transaction module ------------------------------------------------------------

    def _prepare(self, records: Sequence[Record]) -> list[Prepared]:
        """Partition each record and check its size, before any of them is produced.

        Raises:
            RecordTooLarge: a record exceeds the client's or its topic's size limit.
        """
        out: list[Prepared] = []
        client_max = int(self.config.properties.get("message.max.bytes", CLIENT_MAX_BYTES))
        for record in records:
            partitions, topic_max = self._topic_meta(record.topic)
            size = len(record.key or b"") + len(record.value or b"") + _FRAMING_BYTES
            if size > min(client_max, topic_max):
                raise RecordTooLarge(
                    f"kafka log: a record of {record.topic} with key {record.key!r} is "
                    f"{size - _FRAMING_BYTES} bytes, over the limit of "
                    f"{min(client_max, topic_max) - _FRAMING_BYTES} (message.max.bytes of the "
                    "client, max.message.bytes of the topic)"
                )
            out.append(
                (record.topic, partition_for(record.key, partitions), record.key, record.value)
            )
        return out

    def _wait_visible(self, last: dict[tuple[str, int], int]) -> None:
        """Wait (briefly) until read_committed readers get past each partition's ``last`` offset."""
        pending = dict(last)
        deadline = time.monotonic() + _VISIBLE_WAIT_S
        while pending and time.monotonic() < deadline:
            request = {KafkaPartition(t, p): _LATEST for t, p in pending}
            try:
                futures = self._admin.list_offsets(
                    request,
                    isolation_level=IsolationLevel.READ_COMMITTED,
                    request_timeout=_VISIBLE_WAIT_S,
                )
                for tp, future in futures.items():
                    if future.result().offset > pending[tp.topic, tp.partition]:
                        del pending[tp.topic, tp.partition]
            except KafkaException:
                return  # the commit is durable; only its visibility is late
            if pending:
                time.sleep(0.002)

    # -- internals -----------------------------------------------------------------------------

    def _check_reachable(self) -> None:
        timeout = self.config.connect_timeout_s
        try:
            metadata = self._admin.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise LogUnavailable(
                f"kafka log: cannot reach the brokers at {self.servers} within {timeout:.0f} s "
                f"({error_of(exc) or exc}); check log.bootstrap_servers and that Kafka is up"
            ) from exc
        self._remember(metadata)

    def _writer(self, role: str) -> TransactionalWriter:
        with self._lock:
            if self.closed:
                raise LogError("kafka log: the log is closed")
            writer = self._writers.get(role)
            if writer is None:
                tid = f"cdc-{self.pipeline}"
                if role != "source":
                    tid += f"-{uuid.uuid4().hex[:12]}"
                writer = TransactionalWriter(
                    self._producer_config(), tid, self.config.transaction_timeout_ms / 1000
                )
                self._writers[role] = writer
            return writer

    def _producer_config(self) -> dict[str, Any]:
        timeout_ms = self.config.transaction_timeout_ms
        return client_config(
            self.config,
            **{
                "enable.idempotence": True,
                "acks": "all",
                "partitioner": "murmur2_random",
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

    def _partition_reader(self) -> PartitionReader:
        with self._lock:
            if self.closed:
                raise LogError("kafka log: the log is closed")
            if self._reader is None:
                self._reader = PartitionReader(
                    client_config(
                        self.config,
                        **{
                            "group.id": f"cdc-{self.pipeline}-reader",  # never joins nor commits
                            "isolation.level": "read_committed",
                            "enable.auto.commit": False,
                            "enable.auto.offset.store": False,
                            "enable.partition.eof": True,
                            "auto.offset.reset": "earliest",
                            "fetch.wait.max.ms": 10,
                            "queued.max.messages.kbytes": 16_384,
                        },
                    )
                )
            return self._reader

    def _read_to_end(self, topic: str, partition: int) -> list[StoredRecord]:
        out: list[StoredRecord] = []
        end = self.end_offsets(topic)[partition]
        reader = self._partition_reader()
        offset = 0
        while True:
            batch = reader.read(topic, partition, offset, 10_000, end)
            if not batch:
                return out
            out += batch
            offset = batch[-1].offset + 1

    def _ensure_offsets_topic(self) -> None:
        if not self._offsets_topic_ready:
            if self.offsets_topic not in self._metadata(refresh=True):
                self._create([self.offsets_topic], 1)
            self._offsets_topic_ready = True

    def _create(self, names: list[str], partitions: int) -> None:
        if not names:
            return
        config = self._topic_config()
        rf = self.config.replication_factor
        new = [NewTopic(name, partitions, rf, config=config) for name in names]
        with translated(f"creating topics {', '.join(names)}", self.servers):
            futures = self._admin.create_topics(new, request_timeout=_ADMIN_TIMEOUT_S)
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                err = error_of(exc)
                if err is None or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise translate(exc, f"creating topic {name}", self.servers) from exc
        self._wait_for_leaders(names)

    def _wait_for_leaders(self, names: list[str]) -> None:
        """Wait until every partition of ``names`` has a leader: until then, requests fail."""
        deadline = time.monotonic() + _ADMIN_TIMEOUT_S
        while True:
            with translated("reading cluster metadata", self.servers):
                metadata = self._admin.list_topics(timeout=_ADMIN_TIMEOUT_S)
            self._remember(metadata)
            topics = [metadata.topics.get(name) for name in names]
            if all(
                t is not None
                and t.error is None
                and all(p.leader >= 0 for p in t.partitions.values())
                for t in topics
            ):
                return
            if time.monotonic() > deadline:
                raise LogUnavailable(f"kafka log ({self.servers}): topics {names} have no leader")
            time.sleep(0.05)

    def _topic_config(self) -> dict[str, str]:
        config = {
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": str(self.config.min_compaction_lag_ms),
            "delete.retention.ms": str(self.config.delete_retention_ms),
        }
        if self.config.segment_ms is not None:
            config["segment.ms"] = str(self.config.segment_ms)
        return {**config, **self.config.topic_properties}

    def _topic_meta(self, topic: str) -> tuple[int, int]:
        meta = self._topics.get(topic)
        if meta is None:
            if topic not in self._metadata(refresh=True):
                self.ensure_topics([topic])  # as in the embedded log, appending creates a topic
            partitions = self._metadata()[topic]
            max_bytes = int(self._describe_configs([topic])[topic].get("max.message.bytes", 0))
            meta = (partitions, max_bytes or CLIENT_MAX_BYTES)
            with self._lock:
                self._topics[topic] = meta
        return meta

    def _metadata(self, refresh: bool = False) -> dict[str, int]:
        if refresh:
            with translated("reading cluster metadata", self.servers):
                self._remember(self._admin.list_topics(timeout=_ADMIN_TIMEOUT_S))
        return self._known

    def _remember(self, metadata: Any) -> None:
        self._known = {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }

    def _describe_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in topics]
        with translated("describing topic configs", self.servers):
            futures = self._admin.describe_configs(resources, request_timeout=_ADMIN_TIMEOUT_S)
            return {
                resource.name: {
                    k: v.value for k, v in future.result().items() if v.value is not None
                }
                for resource, future in futures.items()
            }

    def _list_offsets(self, counts: dict[str, int], spec: Any) -> dict[str, dict[int, int]]:
        request = {KafkaPartition(t, p): spec for t, n in counts.items() for p in range(n)}
        deadline = time.monotonic() + _ADMIN_TIMEOUT_S
        while True:
            out: dict[str, dict[int, int]] = {topic: {} for topic in counts}
            try:
                futures = self._admin.list_offsets(
                    request,
                    isolation_level=IsolationLevel.READ_COMMITTED,
                    request_timeout=_ADMIN_TIMEOUT_S,
                )
                for tp, future in futures.items():
                    out[tp.topic][tp.partition] = future.result().offset
                return out
            except KafkaException as exc:
                # A leader moving (new topic, broker restart) fails this briefly: try again.
                err = error_of(exc)
                if err is None or err.fatal() or time.monotonic() > deadline:
                    raise translate(exc, "listing offsets", self.servers) from exc
                time.sleep(0.1)
