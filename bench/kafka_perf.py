"""Kafka's own producer perf test (``kafka-producer-perf-test``) as a bench's baseline.

Runs ``org.apache.kafka.tools.ProducerPerformance`` from ``tests/kafka/target/lib`` (the
``kafka-tools`` artifact that ``tests/kafka/pom.xml`` fetches; Maven runs first if it is
missing) with the machine's Java, ``-Xmx512m`` as ``kafka-producer-perf-test.sh`` sets, and
returns its own records/s figure with the CPU seconds and peak RSS of its JVM.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.services.jvm import ensure_jars, find_java
from tests.services.kafka import ENV_LIB

MAIN_CLASS = "org.apache.kafka.tools.ProducerPerformance"
#: Its summary line: ``1000000 records sent, 254452.9 records/sec (60.67 MB/sec), ...``.
_SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")


@dataclass(frozen=True)
class PerfSettings:
    """What the perf test sends, and how."""

    records: int
    partitions: int
    transaction_ms: int  # --transaction-duration-ms: the length of each transaction
    producer: dict[str, str]  # producer settings beside bootstrap.servers
    payload_file: Path | None = None  # payloads, one a line (our records' values)
    record_size: int = 0  # without a payload file: random payloads of this size


@dataclass(frozen=True)
class PerfResult:
    """The perf test's own throughput, with its JVM's CPU and peak RSS."""

    records: int
    rate: float
    cpu_seconds: float
    peak_rss_mb: float

    @property
    def cpu_us_per_record(self) -> float:
        return self.cpu_seconds / self.records * 1e6


def producer_perf(bootstrap: str, settings: PerfSettings, workdir: Path) -> PerfResult:
    """Run the perf test once against ``bootstrap``, into a new topic of its own.

    Raises:
        RuntimeError: it failed, or printed no summary line.
    """
    lib = ensure_jars("kafka", "kafka-tools-[0-9]*.jar", ENV_LIB)
    topic = f"perf_{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic, settings.partitions)
    argv = [find_java() or "java", "-Xmx512m", "-cp", f"{lib}/*", MAIN_CLASS]
    argv += ["--topic", topic, "--num-records", str(settings.records), "--throughput", "-1"]
    if settings.payload_file is not None:
        argv += ["--payload-file", str(settings.payload_file)]
    else:
        argv += ["--record-size", str(settings.record_size)]
    # Keyed, one key a record (as a snapshot's): the topic can be compacted as ours are.
    argv += ["--key-distribution", "range", "--record-key-range", str(settings.records)]
    argv += ["--transactional-id", f"perf-{topic}"]
    argv += ["--transaction-duration-ms", str(settings.transaction_ms)]
    argv += ["--bootstrap-server", bootstrap]
    argv += ["--command-property", *(f"{k}={v}" for k, v in settings.producer.items())]
    workdir.mkdir(parents=True, exist_ok=True)
    out_path = workdir / f"{topic}.out"
    with out_path.open("w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        # wait4: this child's own CPU and peak RSS (RUSAGE_CHILDREN mixes every child reaped).
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    text = out_path.read_text()
    found = _SUMMARY.findall(text)
    if process.returncode != 0 or not found:
        raise RuntimeError(f"{MAIN_CLASS} failed ({process.returncode}):\n{text[-3000:]}")
    records, rate = found[-1]
    return PerfResult(
        records=int(records),
        rate=float(rate),
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        peak_rss_mb=usage.ru_maxrss / 1024,
    )


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    new = NewTopic(topic, partitions, 1, config={"cleanup.policy": "compact"})
    for future in admin.create_topics([new]).values():
        future.result(30)
