"""HTTP webhook sink throughput against the same request bodies POSTed in a plain loop.

The workload is the DuckDB bench's (:mod:`bench.sinks_duckdb`, so the sinks are compared on the
same data): N changes of a 6-column table, about 80% inserts, 15% updates and 5% deletes (each
delete followed by its tombstone), appended to a real :class:`~cdc.log.embedded.EmbeddedLog`.
The real :class:`~cdc.runtime.sink_task.SinkTask` then sends them (poll, decode, each record's
id and JSON, signed batches of ``--batch-size`` records, one request at a time over a pooled
keep-alive ``httpx`` client; then the consumer offsets) to a receiver in this process
(:mod:`tests.integration.webhook_receiver`, lean: it verifies every signature with the documented
code and counts the records), timed from start to the last committed offset.

The baseline, in the same run, against the same receiver: the very bodies the sink sends, built
beforehand, signed and POSTed by the same client in a loop: the receiver's bulk path, what an
HTTP client cannot go below. Both sides' CPU is this whole process's, the receiver's threads
included on each side.

Usage: ``python bench/sinks_http.py [--changes N] [--batch B] [--batch-size S]``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path, and bench/sinks.py would shadow the
# sinks package: the repository root goes first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures, add_sink, sink_result
from bench.sinks_duckdb import PIPELINE, TOPIC, changes, fill_log, run_sink
from cdc.contracts.sink import SinkContext
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.sink_task import decode_records
from cdc.support.logging import configure
from sinks.http import HttpSink, HttpSinkConfig, signing, wire
from sinks.http.sink import client
from tests.integration.webhook_receiver import Receiver

SECRET = "whsec_YmVuY2gtc2VjcmV0LWtleS0wMTIzNDU2Nzg5"


def bodies(log: EmbeddedLog, config: HttpSinkConfig) -> tuple[list[tuple[str, bytes]], int]:
    """The requests the sink sends for the log's records, ``(webhook-id, body)``, and how many
    records they hold."""
    consumer = log.consumer("bench.bodies", [TOPIC])
    out: list[tuple[str, bytes]] = []
    count = 0
    prefix = f"{PIPELINE}."
    before = None
    while stored := consumer.poll(50_000, 0.2):
        entries = []
        for r in decode_records(stored):
            if not wire.follows_its_delete(r, before):  # as the sink folds it into its delete
                entries.append(wire.entry(r, config.format, prefix))
            before = r
        sent = [e for e in entries if e is not None]
        count += len(sent)
        for start in range(0, len(sent), config.batch_size):
            batch = sent[start : start + config.batch_size]
            out.append((wire.message_id(batch), wire.body(PIPELINE, config.name, batch)))
    consumer.close()
    return out, count


def baseline(requests: list[tuple[str, bytes]], config: HttpSinkConfig) -> tuple[float, float]:
    """Wall and CPU seconds the same bodies take, signed and POSTed in a loop."""
    key = signing.signing_key(SECRET)
    url = config.url.get_secret_value()
    with client(config) as http:
        cpu, started = time.process_time(), time.perf_counter()
        for message, body in requests:
            headers = signing.headers(key, message, int(time.time()), body)
            http.post(url, content=body, headers=headers).raise_for_status()
        return time.perf_counter() - started, time.process_time() - cpu


def bench_http(n: int, batch: int, batch_size: int) -> dict[str, Any]:
    events = changes(n)
    receiver = Receiver(SECRET, lean=True)
    config = HttpSinkConfig(name="hooks", url=receiver.url, secret=SECRET, batch_size=batch_size)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
            log = EmbeddedLog(Path(tmp) / "log", durability="normal")
            records = fill_log(log, events)
            del events
            requests, sent = bodies(log, config)
            base = baseline(requests, config)
            del requests
            gc.collect()
            receiver.taken = 0

            def make(context: SinkContext) -> HttpSink:
                return HttpSink(config, context)

            sink = run_sink(log, "hooks", make, records, batch)
            log.close()
        assert receiver.taken == sent, (receiver.taken, sent)
    finally:
        receiver.close()
    return sink_result(
        "http",
        n,
        base,
        sink,
        records=records,
        records_sent=sent,
        batch=batch,
        batch_size=batch_size,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=5000, help="sink task max_records")
    parser.add_argument("--batch-size", type=int, default=500, help="records per request")
    args = parser.parse_args()
    configure(level="warning")
    r = bench_http(args.changes, args.batch, args.batch_size)
    print(
        f"HTTP sink: {r['changes']:,} changes ({r['records_sent']:,} records sent) in "
        f"{r['sink_s']} s through the sink task, {r['batch_size']} records a request: "
        f"{r['sink_rows_per_s']:,} rows/s, {r['sink_rows_per_cpu_s']:,} rows per CPU-second "
        "of this process (the receiver's included)"
    )
    print(
        f"baseline, the same bodies POSTed in a loop: {r['baseline_rows_per_s']:,} rows/s, "
        f"{r['baseline_rows_per_cpu_s']:,} rows per CPU-second"
    )
    print(
        f"ratio sink/baseline: {r['ratio_to_baseline']} "
        f"(per CPU-second {r['cpu_ratio_to_baseline']}); machine: {r['cpus']} CPUs, "
        f"load average {r['load_average_1m']} at the end"
    )
    figures = Figures("sinks_http")
    add_sink(figures, r)
    figures.emit()


if __name__ == "__main__":
    main()
