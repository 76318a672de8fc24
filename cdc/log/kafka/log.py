"""The Kafka log: the pipeline's topics on Apache Kafka, through confluent-kafka (librdkafka).

Same semantics as the embedded log, with Kafka's mechanisms:

- Topics are created compacted (``cleanup.policy=compact``, ``min.compaction.lag.ms``,
  ``delete.retention.ms``) with the configured partitions and replication factor; existing
  topics are left as they are.
- Records of one key go to ``murmur2(key) % partitions`` (Java's default partitioner): the
  producer's ``partitioner`` is ``murmur2_random``, which a user's ``properties`` cannot
  override, and :func:`cdc.log.partitioner.partition_for` computes the same; a record without a key
  goes to partition 0, as in the embedded log.
- Records and source offsets commit in one Kafka transaction. Source offsets are JSON records
  of the compacted topic ``<pipeline>.__offsets`` (one partition), as in Kafka Connect.
- Readers use ``read_committed``. Offsets are Kafka's: transaction markers take offsets too,
  so a partition's offsets have gaps, and ``record_count`` counts markers (an estimate).

Which producer a transaction uses: the thread that calls :meth:`KafkaLog.claim_source` (the
runtime's source task, before every session) writes with ``transactional.id = cdc-<pipeline>``, so a
second, zombie instance of the source is fenced. Transactions begun on other threads (a sink
worker's dead letters, tools) use an id unique to this log instance: a sinks-only worker must
never fence the pipeline's source on another host. A live join view's term claims an id of its
own (:meth:`KafkaLog.claim_writer`, :mod:`cdc.log.kafka.claim`), which fences the view's older
holder.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cdc.config.models import KafkaLogConfig
from cdc.contracts import positions
from cdc.contracts.errors import LogError, RecordTooLarge
from cdc.log.base import (
    PartitionsCallback,
    Record,
    StartOffsets,
    StoredRecord,
    TopicInfo,
    TopicPartition,
)
from cdc.log.kafka.admin import EARLIEST, LATEST, KafkaAdmin
from cdc.log.kafka.claim import ClaimedWriter
from cdc.log.kafka.common import (
    UNASSIGNED,
    client_config,
    producer_config,
    reader_config,
    translated,
)
from cdc.log.kafka.consumer import KafkaConsumer
from cdc.log.kafka.groups import GroupDescription
from cdc.log.kafka.image_sync import SourceImages, split_mark
from cdc.log.kafka.messages import RecordsCallback
from cdc.log.kafka.partition_reader import PartitionReader
from cdc.log.kafka.txn import KafkaTransaction, TransactionalWriter
from cdc.log.offsets import decode_offset
from cdc.log.partitioner import partition_for

#: librdkafka's default ``message.max.bytes``: the client refuses larger records itself.
CLIENT_MAX_BYTES = 1_000_000
#: Room for the record batch's own header and the record's framing.
_FRAMING_BYTES = 128


class KafkaLog:
    """A :class:`~cdc.log.base.Log` on a Kafka cluster.

    Args:
        pipeline: the pipeline name (offsets topic, transactional id, reader group).
        config: the pipeline file's ``log`` section.
        state_dir: where the source keeps its latest images (:mod:`cdc.log.kafka.image_sync`);
            without one, keys cannot be looked up (``latest_value`` raises).

    Raises:
        LogUnavailable: no broker answered within ``config.connect_timeout_s``.
    """

    def __init__(
        self, pipeline: str, config: KafkaLogConfig, state_dir: Path | None = None
    ) -> None:
        self.pipeline = pipeline
        self.config = config
        self.servers = config.bootstrap_servers
        self.offsets_topic = f"{pipeline}.__offsets"
        # What store_offsets checks a new position against (the offsets topic is a round trip).
        self.committed_positions = positions.CommittedPositions()
        self._admin = KafkaAdmin(config)
        self._topics: dict[str, tuple[int, int]] = {}  # topic -> (partitions, max message bytes)
        self._lock = threading.Lock()
        self._source_thread: int | None = None
        self._writers: dict[str, TransactionalWriter] = {}
        self._reader: PartitionReader | None = None
        self._offsets_topic_ready = False
        self._images = None if state_dir is None else SourceImages(self, state_dir)
        self.closed = False

    # -- writing -------------------------------------------------------------------------------

    def ensure_topics(self, names: Sequence[str]) -> None:
        """Create missing topics compacted, with the configured partitions and replicas."""
        known = self._admin.partitions(refresh=True)
        self._create([n for n in dict.fromkeys(names) if n not in known], self.config.partitions)

    def partition_for(self, topic: str, key: bytes | None) -> int:
        """``murmur2(key) % partitions`` of the topic (not created yet: the configured count)."""
        return partition_for(key, self._admin.count(topic) or self.config.partitions)

    def begin(self) -> KafkaTransaction:
        """Start a transaction (waits while another thread's transaction holds the producer)."""
        self._ensure_offsets_topic()
        source = threading.get_ident() == self._source_thread
        images = self._images if source and self._images and self._images.active else None
        return KafkaTransaction(self, self._writer("source" if source else "other"), images)

    def claim_writer(self, transactional_id: str) -> ClaimedWriter:
        """Claim ``transactional_id`` for one term of a lease: its ``init_transactions`` runs
        now, fencing every older producer of the id (an older holder's open transaction is
        aborted, its later commits fail). The claim never makes a second producer
        (:mod:`cdc.log.kafka.claim`).

        Raises:
            LogFatal: the broker refused the transactional id.
            LogUnavailable: no broker answered in time.
        """
        writer = TransactionalWriter(
            producer_config(self.config),
            transactional_id,
            self.config.transaction_timeout_ms / 1000,
            once=True,
        )
        role = f"claim:{transactional_id}"
        with self._lock:
            if self.closed:
                raise LogError("kafka log: the log is closed")
            previous, self._writers[role] = self._writers.get(role), writer
        if previous is not None:
            previous.close()  # an earlier term's claim left open: this one fences it anyway

        def forget() -> None:
            with self._lock:
                if self._writers.get(role) is writer:
                    del self._writers[role]

        try:
            writer.producer()
        except BaseException:
            writer.close()
            forget()
            raise
        return ClaimedWriter(self, writer, forget)

    def claim_source(self) -> None:
        """The calling thread becomes the source writer, and its ``init_transactions`` runs now.

        That fences an older instance of this pipeline's source (a zombie's open transaction
        is aborted, its later commits fail) before the offsets are read, and keeps the set-up,
        which can take seconds, out of the first transaction's latency.

        Raises:
            LogFatal: the broker refused the transactional id.
            LogUnavailable: no broker answered in time.
        """
        self._source_thread = threading.get_ident()
        self._ensure_offsets_topic()
        self._writer("source").producer()

    def source_offsets(self) -> dict[str, Any]:
        """The last value of each key of the offsets topic, read to its end (read_committed),
        without the latest images' commit mark."""
        self._ensure_offsets_topic()
        offsets: dict[str, Any] = {}
        for record in self._read_to_end(self.offsets_topic, 0):
            key = (record.key or b"").decode()
            if record.value is None:
                offsets.pop(key, None)
            else:
                offsets[key] = decode_offset(record.value)
        mark = split_mark(offsets)
        if self._images is not None and threading.get_ident() == self._source_thread:
            self._images.offsets_read(mark, offsets)
        return offsets

    def defer_key_index(self) -> bool:
        """Nothing to defer: Kafka keeps no key index (the latest images are kept apart)."""
        return False

    def build_key_index(self) -> None:
        """Nothing to build (see :meth:`defer_key_index`)."""

    def keep_latest(self, fields: Mapping[str, Sequence[str]]) -> None:
        """Keep the latest ``fields`` of each key of these topics in the local store, so that
        :meth:`latest_value` answers for them; restores what the store lacks from the topics.

        Raises:
            LogError: not called on the source writer's thread (see :meth:`claim_source`).
            LogUnavailable: the brokers or the store failed; retried with the session.
        """
        if self._images is None:
            return
        if threading.get_ident() != self._source_thread:
            raise LogError("kafka log: keep_latest is for the source's thread (claim_source)")
        self._images.declare(fields)

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

    def first_record_offset(self, topic: str, partition: int, start: int, end: int) -> int | None:
        """The offset of the partition's first committed record at or after ``start`` and
        below ``end`` (a last stable offset read earlier); ``None`` when there is none: the
        offsets between hold only transaction markers and aborted records, which no reader
        gets (a fence's test of whether a sink has data left, :mod:`cdc.fence`).

        Raises:
            LogUnavailable: the broker did not answer.
        """
        found = self._partition_reader().read(topic, partition, start, 1, end)
        return found[0].offset if found and found[0].offset < end else None

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's last stable offset: the next offset a read_committed reader gets."""
        count = self._admin.count(topic)
        if count is None:
            raise LogError(f"kafka log: unknown topic {topic!r}")
        return self._admin.offsets({topic: count}, LATEST)[topic]

    def topics(self) -> list[TopicInfo]:
        """Every topic but Kafka's internal ones, with configs and offsets.

        ``record_count`` is ``end - start`` summed over partitions: an estimate that counts
        transaction markers and records compaction has not removed yet.
        """
        counts = {
            name: count
            for name, count in self._admin.partitions(refresh=True).items()
            if not name.startswith("__")
        }
        if not counts:
            return []
        configs = self._admin.configs(list(counts))
        starts = self._admin.offsets(counts, EARLIEST)
        ends = self._admin.offsets(counts, LATEST)
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
        return self._admin.committed(group)

    def groups(self) -> list[str]:
        """Every consumer group the cluster knows, sorted."""
        return self._admin.groups()

    def describe_group(self, group: str) -> GroupDescription:
        """The group's state, members and each member's partitions (Kafka only: ``cdc
        status`` asks for it where a log has it)."""
        return self._admin.describe_group(group)

    def latest_value(self, topic: str, key: bytes) -> bytes | None:
        """``{"after": {kept fields}}`` of the key's latest record, from the local store of a
        topic declared with :meth:`keep_latest` (on the source's thread: committed, or appended
        by its open transaction); ``None`` if absent, deleted or tombstoned.

        Raises:
            NotImplementedError: Kafka cannot look keys up otherwise (another thread, a topic
                not declared, or no state directory).
        """
        if self._images is None or threading.get_ident() != self._source_thread:
            raise NotImplementedError("the Kafka log cannot look up a key's latest value")
        return self._images.lookup(topic, key)

    def scan_committed(self, topic: str, batch: int, apply: RecordsCallback) -> None:
        """Hand every record of ``topic`` committed as of now to ``apply``, in lists of at most
        ``batch``, each partition in offset order (nothing for a topic that does not exist)."""
        count = self._admin.count(topic)
        if count is not None:
            ends = self._admin.offsets({topic: count}, LATEST)[topic]
            self._partition_reader().scan(topic, ends, batch, apply)

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the producers, the readers and the kept offsets readers. Stop using the log's
        consumers first."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            writers, self._writers = list(self._writers.values()), {}
            reader, self._reader = self._reader, None
        # Each one closed even where another's close raised; the callbacks run last in first.
        with contextlib.ExitStack() as closing:
            closing.callback(self._admin.close)
            if reader is not None:
                closing.callback(reader.close)
            if self._images is not None:
                closing.callback(self._images.close)
            for writer in writers:
                closing.callback(writer.close)

    def __enter__(self) -> KafkaLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- for its transactions (cdc.log.kafka.txn.TransactionLog) ------------------------------

    def prepare(self, records: Sequence[Record]) -> dict[str, int]:
        """Check each record's size before any of them is produced, and say where each
        topic's records go: partition 0, or :data:`UNASSIGNED` for the producer's murmur2
        partitioner (which ``tests/integration/test_kafka_log.py`` holds to
        :func:`cdc.log.partitioner.partition_for`) on a topic of several partitions.

        Raises:
            RecordTooLarge: a record exceeds the client's or its topic's size limit.
        """
        client_max = int(self.config.properties.get("message.max.bytes", CLIENT_MAX_BYTES))
        placement: dict[str, int] = {}
        topic, limit = None, 0
        for record in records:  # one pass, nothing built a record: this runs for every row
            if record.topic != topic:
                topic = record.topic
                partitions, topic_max = self._topic_meta(topic)
                limit = min(client_max, topic_max) - _FRAMING_BYTES
                # A keyed record of a multi-partition topic: the producer's murmur2_random
                # partitioner (C, Java-compatible, the same partition_for computes) places it.
                placement[topic] = UNASSIGNED if partitions > 1 else 0
            size = len(record.key or b"") + len(record.value or b"") + len(record.pos or b"")
            if size > limit:
                raise RecordTooLarge(
                    f"kafka log: a record of {topic} with key {record.key!r} is {size} bytes, "
                    f"over the limit of {limit} (message.max.bytes of the client, "
                    "max.message.bytes of the topic)"
                )
        return placement

    def wait_visible(self, last: dict[tuple[str, int], int]) -> None:
        """Wait until readers see each partition's records up to its ``last`` offset: the
        broker writes a transaction's commit markers after it answered the commit."""
        self._admin.wait_visible(last)

    # -- internals -----------------------------------------------------------------------------

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
                    producer_config(self.config), tid, self.config.transaction_timeout_ms / 1000
                )
                self._writers[role] = writer
            return writer

    def _partition_reader(self) -> PartitionReader:
        with self._lock:
            if self.closed:
                raise LogError("kafka log: the log is closed")
            if self._reader is None:
                self._reader = PartitionReader(reader_config(self.config, self.pipeline))
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
            if self.offsets_topic not in self._admin.partitions(refresh=True):
                # Every commit adds a record here and a restart reads them all: small segments
                # let the cleaner compact all but the newest hour (the active segment never is).
                small = {"segment.ms": "3600000", "segment.bytes": str(16 << 20)}
                self._create([self.offsets_topic], 1, small)
            self._offsets_topic_ready = True

    def _create(
        self, names: list[str], partitions: int, defaults: dict[str, str] | None = None
    ) -> None:
        rf = self.config.replication_factor
        config = {**(defaults or {}), **self._topic_config()}
        self._admin.create(names, partitions, rf, config)

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
            if topic not in self._admin.partitions(refresh=True):
                self.ensure_topics([topic])  # as in the embedded log, appending creates a topic
            partitions = self._admin.partitions()[topic]
            max_bytes = int(self._admin.configs([topic])[topic].get("max.message.bytes", 0))
            meta = (partitions, max_bytes or CLIENT_MAX_BYTES)
            with self._lock:
                self._topics[topic] = meta
        return meta
