"""Initial snapshot throughput into the Kafka log, against Kafka's own producer perf test.

A throwaway PostgreSQL 15 cluster gets ``bench/pg_snapshot.py``'s table (an int key and six
mixed columns), 1,000,000 rows by default. The snapshot runs through the real runtime
(:class:`cdc.runtime.source_task.SourceTask` polling the snapshotting PostgreSQL source) into
:class:`cdc.log.kafka.KafkaLog` on a local KRaft broker (``tests.services.kafka.LocalKafka``, or
``--bootstrap``): a transactional producer with ``acks=all``, each piece committed with its
progress in the offsets topic, the latest-image store kept as a pipeline keeps it. The clock
runs from the task's start until the last chunk's progress is committed.

Baseline, in the same run against the same broker: ``kafka-producer-perf-test``
(``org.apache.kafka.tools.ProducerPerformance`` from ``tests/kafka/target/lib``, fetched by
``make jars``) with the same record count, ``acks=all``, idempotent and transactional
(``--transactional-id``, ``--transaction-duration-ms``: our mean transaction length), our
producer's ``compression.type`` and ``linger.ms``, and as payloads a sample of our own records'
values (``--payload-file``), so the sizes and their compressibility are ours; with
``--record-size-only`` it sends ``--record-size`` random bytes of our mean value size instead.
Its records are keyed (``--key-distribution range``: one key a record, as a snapshot's) on a
compacted topic as ours, but without our ``cdc.pos`` header, and its keys are the decimal
integers where ours are JSON objects (``{"id":123}``).

Printed: rows/s, CPU us a row of this process (all its threads) and its peak RSS, the same of
the perf test's JVM (``-Xmx512m``, as ``kafka-producer-perf-test.sh`` sets), the load, and the
JSON figure lines (:mod:`bench.report`). ``--rounds`` alternates ours and the baseline.

Usage: ``python -m bench.kafka_snapshot [--rows N] [--rounds R] [--partitions P] [--workers W]
[--chunk-rows C] [--bootstrap HOST:PORT] [--record-size-only]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from bench.kafka_perf import PerfResult, PerfSettings, producer_perf
from bench.pg_snapshot import fill_table
from bench.report import Figures
from cdc.config.models import KafkaLogConfig
from cdc.contracts.snapshot_offsets import progress
from cdc.contracts.source import SourceContext
from cdc.envelope.options import READABLE
from cdc.log.kafka import KafkaLog
from cdc.log.kafka.common import producer_config
from cdc.runtime.pipeline import GC_THRESHOLDS
from cdc.runtime.source_task import SourceTask
from cdc.support.logging import configure
from connectors.postgres import PostgresSourceConfig, drop_replication_objects
from connectors.postgres.snapshot.source import SnapshottingPostgresSource
from tests.services.postgres import LocalPostgres

TARGET_RATE = 250_000
TABLE = "public.t"
RELEASE_TIMEOUT_S = 30.0
#: Records read back from each of a partition's sample windows (the perf test's payloads).
SAMPLE_WINDOW = 200
SAMPLE_WINDOWS = 10


@dataclass(frozen=True)
class OurResult:
    """Our snapshot: how long it took, this process's CPU, and what its records look like."""

    rows: int
    seconds: float
    cpu_seconds: float
    commits: int
    mean_key_bytes: float
    mean_value_bytes: float
    payload_file: Path  # a sample of the values, one a line

    @property
    def rate(self) -> float:
        return self.rows / self.seconds

    @property
    def cpu_us_per_row(self) -> float:
        return self.cpu_seconds / self.rows * 1e6


@dataclass
class Round:
    """One round: our snapshot, then the perf test of the same records."""

    ours: OurResult
    perf: PerfResult


class _Watched:
    """The log, with the snapshot's progress taken from what the task commits: reading the
    offsets topic back every few milliseconds would spend CPU that the figure counts."""

    def __init__(self, log: KafkaLog) -> None:
        self.log = log
        self.entry: dict[str, Any] = {}  # the table's snapshot progress, as last committed
        self.commits = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.log, name)

    def begin(self) -> _WatchedTx:
        return _WatchedTx(self, self.log.begin())

    def done(self) -> bool:
        entry = self.entry
        if not entry:
            return False
        return sum(b - a + 1 for a, b in entry["done"]) == entry["chunks_total"]


class _WatchedTx:
    def __init__(self, watched: _Watched, tx: Any) -> None:
        self._watched, self._tx = watched, tx
        self._entry: dict[str, Any] | None = None

    def append(self, records: Any) -> None:
        self._tx.append(records)

    def store_offsets(self, offsets: Mapping[str, Any]) -> None:
        self._tx.store_offsets(offsets)
        snapshot = progress(offsets) or {}  # each table's progress is a key of its own
        self._entry = snapshot.get("tables", {}).get(TABLE, self._entry)

    def commit(self) -> None:
        self._tx.commit()
        self._watched.commits += 1
        if self._entry is not None:
            self._watched.entry = self._entry

    def abort(self) -> None:
        self._tx.abort()


def snapshot_to_kafka(
    dsn: str, bootstrap: str, pipeline: str, workdir: Path, args: argparse.Namespace
) -> OurResult:
    """Snapshot table ``t`` into a new Kafka log of pipeline ``pipeline``, through the runtime."""
    config = KafkaLogConfig(type="kafka", bootstrap_servers=bootstrap, partitions=args.partitions)
    log = KafkaLog(pipeline, config, state_dir=workdir / "state")
    watched = _Watched(log)
    source_config = _source_config(dsn, args)
    stop = threading.Event()
    task = _task(pipeline, source_config, watched, stop)
    thread = threading.Thread(target=task.run, daemon=True)
    started, cpu_started = time.perf_counter(), time.process_time()
    thread.start()
    try:
        while not watched.done():
            if not thread.is_alive():
                raise SystemExit("the source task stopped before the snapshot finished")
            time.sleep(0.02)
        took, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        rows = int(watched.entry["rows"])
    finally:
        stop.set()
        thread.join(30)
        drop_replication_objects(source_config, pipeline, release_wait_s=RELEASE_TIMEOUT_S)
    try:
        keys, values = _sample(log, f"{pipeline}.{TABLE}")
    finally:
        log.close()
    payloads = workdir / "payloads.txt"
    payloads.write_bytes(b"\n".join(values))
    return OurResult(
        rows=rows,
        seconds=took,
        cpu_seconds=cpu,
        commits=watched.commits,
        mean_key_bytes=statistics.fmean(len(k) for k in keys),
        mean_value_bytes=statistics.fmean(len(v) for v in values),
        payload_file=payloads,
    )


def _task(
    pipeline: str, config: PostgresSourceConfig, log: Any, stop: threading.Event
) -> SourceTask:
    """The runtime's source task of the snapshotting source, appending to ``log``."""
    logger = structlog.get_logger()
    context = SourceContext(pipeline=pipeline, log=log, logger=logger, envelope=READABLE)
    return SourceTask(
        pipeline,
        log,
        lambda: SnapshottingPostgresSource(config, context),
        stop,
        logger,
        envelope_options=READABLE,
    )


def _source_config(dsn: str, args: argparse.Namespace) -> PostgresSourceConfig:
    return PostgresSourceConfig.model_validate(
        {
            "type": "postgres",
            "dsn": dsn,
            "tables": [TABLE],
            "snapshot": "initial",
            "snapshot_workers": args.workers,
            "snapshot_chunk_rows": args.chunk_rows,
        }
    )


def _sample(log: KafkaLog, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Keys and values of windows spread over every partition of ``topic``."""
    keys: list[bytes] = []
    values: list[bytes] = []
    for partition, end in log.end_offsets(topic).items():
        for window in range(SAMPLE_WINDOWS):
            offset = end * window // SAMPLE_WINDOWS
            for record in log.read(topic, partition, offset, SAMPLE_WINDOW):
                if record.key is not None and record.value is not None:
                    keys.append(record.key)
                    values.append(record.value)
    return keys, values


def _perf_settings(ours: OurResult, args: argparse.Namespace) -> PerfSettings:
    """The perf test of our records: their count and values, our producer's settings, and
    transactions as long as ours were on average."""
    ours_producer = producer_config(KafkaLogConfig(type="kafka", bootstrap_servers="-"))
    producer = {
        "acks": "all",
        "enable.idempotence": "true",
        "compression.type": str(ours_producer["compression.type"]),
        "linger.ms": str(ours_producer["linger.ms"]),
    }
    return PerfSettings(
        records=ours.rows,
        partitions=args.partitions,
        transaction_ms=max(50, round(ours.seconds * 1000 / max(1, ours.commits))),
        producer=producer,
        payload_file=None if args.record_size_only else ours.payload_file,
        record_size=round(ours.mean_value_bytes),
    )


@contextlib.contextmanager
def _broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from tests.services.kafka import LocalKafka

    with LocalKafka(heap="1g") as local:
        yield local.bootstrap_servers


def main() -> None:
    gc.set_threshold(*GC_THRESHOLDS)  # as `cdc run` does
    args = _arguments()
    configure("warning", json=True)
    rounds: list[Round] = []
    with (
        LocalPostgres(settings={"shared_buffers": "256MB"}) as pg,
        _broker(args.bootstrap) as bootstrap,
        tempfile.TemporaryDirectory(prefix="cdc-bench-kafka-") as tmp,
    ):
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        fill_table(dsn, args.rows)
        for number in range(1, args.rounds + 1):
            workdir = Path(tmp) / f"r{number}"
            ours = snapshot_to_kafka(dsn, bootstrap, f"bench_r{number}", workdir, args)
            perf = producer_perf(bootstrap, _perf_settings(ours, args), workdir)
            rounds.append(Round(ours, perf))
            _print_round(number, rounds[-1])
    _report(args, rounds)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--bootstrap", default=os.environ.get("CDC_TEST_KAFKA_BOOTSTRAP"))
    parser.add_argument(
        "--record-size-only",
        action="store_true",
        help="the perf test sends random bytes of our mean value size, not our values",
    )
    return parser.parse_args()


def _print_round(number: int, r: Round) -> None:
    ours, perf = r.ours, r.perf
    print(
        f"round {number}: ours {ours.rate:>9,.0f} rows/s ({ours.seconds:.2f} s, "
        f"{ours.cpu_us_per_row:.2f} us CPU a row, {ours.commits} transactions, "
        f"mean value {ours.mean_value_bytes:.0f} B, key {ours.mean_key_bytes:.0f} B)   "
        f"perf test {perf.rate:>9,.0f} records/s ({perf.cpu_us_per_record:.2f} us CPU a "
        f"record, RSS {perf.peak_rss_mb:.0f} MB)   ratio {ours.rate / perf.rate:.2f}x",
        flush=True,
    )


def _report(args: argparse.Namespace, rounds: list[Round]) -> None:
    rate = statistics.median(r.ours.rate for r in rounds)
    base = statistics.median(r.perf.rate for r in rounds)
    cpu = statistics.median(r.ours.cpu_us_per_row for r in rounds)
    base_cpu = statistics.median(r.perf.cpu_us_per_record for r in rounds)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    base_rss = max(r.perf.peak_rss_mb for r in rounds)
    load = os.getloadavg()
    print(
        f"{args.rows:,} rows, {args.partitions} partitions, {args.workers} workers, "
        f"{args.chunk_rows:,} rows per chunk, {len(rounds)} round(s), cpus={os.cpu_count()}, "
        f"load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    print(f"{'(median)':<36}{'rows/s':>12}{'CPU us/row':>12}{'peak RSS MB':>13}")
    print(f"{'snapshot into the Kafka log':<36}{rate:>12,.0f}{cpu:>12.2f}{rss_mb:>13,.0f}")
    print(f"{'kafka-producer-perf-test':<36}{base:>12,.0f}{base_cpu:>12.2f}{base_rss:>13,.0f}")
    print(f"ratio to the perf test: {rate / base:.2f}x")
    verdict = "ok" if rate >= TARGET_RATE else "MISSED"
    print(f"target >= {TARGET_RATE:,} rows/s: {verdict}")
    figures = Figures("kafka_snapshot")
    figures.add("snapshot_rows_per_s", rate, base)  # baseline: kafka-producer-perf-test
    figures.add("snapshot_cpu_us_per_row", cpu, base_cpu)
    figures.add("snapshot_peak_rss_mb", rss_mb, base_rss)
    figures.emit()


if __name__ == "__main__":
    main()
