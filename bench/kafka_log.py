"""Kafka log throughput on a local broker: transactional appends, then reads, as a figure for
our notes (not a target).

Appends N records (~300 bytes: a ~15-byte JSON key, a ~285-byte Debezium-style JSON value, the
same records as ``bench/log_throughput.py``) in transactions of ``--batch`` records, each with a
stored source offset, as the source task does. Then reads them all back twice: through a
consumer group member (``poll``, as a sink does) and through ``read`` (``cdc tail``).

The broker comes from ``$CDC_TEST_KAFKA_BOOTSTRAP`` or ``--bootstrap``, else a throwaway one is
started from the test jars (``tests/services/kafka.py``), which takes ~10 s more.

Usage: ``python bench/kafka_log.py [--records N] [--batch B] [--partitions P]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.log_throughput import key, value
from bench.report import Figures
from cdc.config import KafkaLogConfig
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


def append(log: KafkaLog, topic: str, records: int, batch: int) -> float:
    """Seconds spent appending (building the records is the caller's work, not timed)."""
    spent = 0.0
    for number, start in enumerate(range(0, records, batch)):
        ids = range(start, min(records, start + batch))
        chunk = [Record(topic, key(i), value(i)) for i in ids]
        started = time.perf_counter()
        txn = log.begin()
        txn.append(chunk)
        txn.store_offsets({"bench": {"batch": number}})
        txn.commit()
        spent += time.perf_counter() - started
    return spent


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--bootstrap", default=os.environ.get("CDC_TEST_KAFKA_BOOTSTRAP"))
    args = parser.parse_args()
    with broker(args.bootstrap) as bootstrap:
        config = KafkaLogConfig(
            type="kafka", bootstrap_servers=bootstrap, partitions=args.partitions
        )
        log = KafkaLog(f"bench_{uuid.uuid4().hex[:8]}", config)
        topic = f"{log.pipeline}.public.customers"
        log.ensure_topics([topic])
        log.claim_source()  # this thread is the source writer, as in the runtime
        try:
            size = len(key(1)) + len(value(1))
            appended = append(log, topic, args.records, args.batch)
            grouped = read_group(log, topic, args.records)
            direct = read_direct(log, topic, args.records)
        finally:
            log.close()
    n = args.records
    print(f"kafka log on {bootstrap}: {n} records of ~{size} bytes, {args.partitions} partitions")
    print(f"append (transactions of {args.batch} + offsets): {n / appended:10,.0f} records/s")
    print(f"read, consumer group poll:                  {n / grouped:10,.0f} records/s")
    print(f"read, log.read by partition:                {n / direct:10,.0f} records/s")
    figures = Figures("kafka_log")  # no baseline client here: our figures alone
    figures.add("append_records_per_s", n / appended)
    figures.add("read_group_records_per_s", n / grouped)
    figures.add("read_direct_records_per_s", n / direct)
    figures.emit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
