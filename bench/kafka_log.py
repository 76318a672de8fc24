"""Kafka log throughput on a local broker: transactional appends, then reads, as a figure for
our notes (not a target).

Appends N records (~300 bytes: a ~15-byte JSON key, a ~285-byte Debezium-style JSON value, the
same records as ``bench/log_throughput.py``, and the ``cdc.pos`` header) in transactions of
``--batch`` records, each with a stored source offset, as the source task does, with the
latest-image store keeping the value's ``name`` as a PostgreSQL source keeps a table's TOAST-able
columns (``--no-images``: without it). The append figure comes with the CPU it took this process
(all threads: librdkafka's too) a record. Then reads them all back twice: through a consumer
group member (``poll``, as a sink does) and through ``read`` (``cdc tail``). Last, the latency of
a first ``read`` of a topic the log's reader has not read yet (``cdc status``, ``cdc tail``, a
fence and ``cdc verify`` read several such topics): the median over ``FIRST_READS`` new topics.

The broker comes from ``$CDC_TEST_KAFKA_BOOTSTRAP`` or ``--bootstrap``, else a throwaway one is
started from the test jars (``tests/services/kafka.py``), which takes ~10 s more.

Usage: ``python -m bench.kafka_log [--records N] [--batch B] [--partitions P] [--no-images]
[--profile FILE]`` (``--profile``: cProfile of the appends, written to FILE).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.log_throughput import key, value
from bench.report import Figures
from cdc.config.models import KafkaLogConfig
from cdc.log.base import Record
from cdc.log.kafka import KafkaLog


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from tests.services.kafka import LocalKafka

    with LocalKafka() as local:
        yield local.bootstrap_servers


def append(log: KafkaLog, topic: str, records: int, batch: int) -> tuple[float, float]:
    """Seconds and CPU seconds spent appending (building the records is not counted)."""
    spent = cpu = 0.0
    for number, start in enumerate(range(0, records, batch)):
        ids = range(start, min(records, start + batch))
        chunk = [Record(topic, key(i), value(i), b"[%d,%d]" % (number, i)) for i in ids]
        started, cpu_started = time.perf_counter(), time.process_time()
        txn = log.begin()
        txn.append(chunk)
        txn.store_offsets({"bench": {"batch": number}})
        txn.commit()
        spent += time.perf_counter() - started
        cpu += time.process_time() - cpu_started
    return spent, cpu


def read_group(log: KafkaLog, topic: str, records: int) -> float:
    consumer = log.consumer(f"bench-{uuid.uuid4().hex[:8]}", [topic])
    try:
        consumer.poll(1, 10)  # join the group and fetch: not part of the rate
        seen = 1
        started = time.perf_counter()
        while seen < records:
            seen += len(consumer.poll(5000, 5))
        return time.perf_counter() - started
    finally:
        consumer.close()


def read_direct(log: KafkaLog, topic: str, records: int) -> float:
    started = time.perf_counter()
    seen = 0
    for partition in log.end_offsets(topic):
        offset = 0
        while True:
            batch = log.read(topic, partition, offset, 10_000)
            if not batch:
                break
            seen += len(batch)
            offset = batch[-1].offset + 1
    assert seen == records, f"read {seen} records, appended {records}"
    return time.perf_counter() - started


FIRST_READS = 5


def first_read_ms(log: KafkaLog) -> float:
    """The median milliseconds of a first ``read`` of each of ``FIRST_READS`` new topics."""
    topics = [f"{log.pipeline}.public.first_{n}" for n in range(FIRST_READS)]
    log.ensure_topics(topics)
    txn = log.begin()
    txn.append([Record(topic, key(1), value(1), b"[0,1]") for topic in topics])
    txn.store_offsets({"bench": {"first_reads": 1}})
    txn.commit()
    spent = []
    for topic in topics:
        (partition,) = [p for p, end in log.end_offsets(topic).items() if end]
        started = time.perf_counter()
        assert len(log.read(topic, partition, 0, 1)) == 1
        spent.append((time.perf_counter() - started) * 1000)
    return statistics.median(spent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--bootstrap", default=os.environ.get("CDC_TEST_KAFKA_BOOTSTRAP"))
    parser.add_argument("--no-images", action="store_true", help="no latest-image store")
    parser.add_argument("--profile", help="write a cProfile of the appends to this file")
    args = parser.parse_args()
    with broker(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as state:
        config = KafkaLogConfig(
            type="kafka", bootstrap_servers=bootstrap, partitions=args.partitions
        )
        log = KafkaLog(f"bench_{uuid.uuid4().hex[:8]}", config, state_dir=Path(state))
        topic = f"{log.pipeline}.public.customers"
        log.ensure_topics([topic])
        log.claim_source()  # this thread is the source writer, as in the runtime
        if not args.no_images:
            log.source_offsets()
            log.keep_latest({topic: ["name"]})  # as a source declares TOAST-able columns
        try:
            size = len(key(1)) + len(value(1))
            profile = cProfile.Profile(time.thread_time) if args.profile else None
            with profile or contextlib.nullcontext():
                appended, cpu = append(log, topic, args.records, args.batch)
            if profile is not None:
                profile.dump_stats(args.profile)
            grouped = read_group(log, topic, args.records)
            direct = read_direct(log, topic, args.records)
            first = first_read_ms(log)
        finally:
            log.close()
    n = args.records
    images = "without" if args.no_images else "with"
    print(f"kafka log on {bootstrap}: {n} records of ~{size} bytes, {args.partitions} partitions")
    print(
        f"append (transactions of {args.batch} + offsets, {images} latest images): "
        f"{n / appended:10,.0f} records/s, {cpu / n * 1e6:.2f} us CPU a record, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(f"read, consumer group poll:                  {n / grouped:10,.0f} records/s")
    print(f"read, log.read by partition:                {n / direct:10,.0f} records/s")
    print(f"first read of a topic (median of {FIRST_READS}):    {first:10,.0f} ms")
    figures = Figures("kafka_log")  # no baseline client here: our figures alone
    figures.variant = "_no_images" if args.no_images else ""
    figures.add("append_records_per_s", n / appended)
    figures.add("append_cpu_us_per_record", cpu / n * 1e6)
    figures.add("read_group_records_per_s", n / grouped)
    figures.add("read_direct_records_per_s", n / direct)
    figures.add("first_read_of_a_topic_ms", first)
    figures.emit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
