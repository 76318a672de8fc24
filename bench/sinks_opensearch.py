"""OpenSearch sink throughput against a raw ``helpers.bulk`` of the same documents.

The workload is the DuckDB bench's (:mod:`bench.sinks_duckdb`, so the sinks are compared on the
same data): N changes of a 6-column table, about 80% inserts, 15% updates and 5% deletes (each
delete followed by its tombstone), appended to a real :class:`~cdc.log.embedded.EmbeddedLog`
with the table's schema on the schema topic. The real :class:`~cdc.runtime.sink_task.SinkTask`
then applies them to an OpenSearch index (poll, decode, write, flush: each key's newest change
of the batch sent with the Bulk API under its external version, then the offsets document;
then the consumer offsets), timed from start to the last committed offset.

The baseline, in the same run and on the same node: every change as a Bulk API action (an
upsert's row indexed under its key, a delete by key) sent by ``opensearchpy.helpers.bulk`` in
chunks of the sink's batch size into a fresh index of the same mapping, with no versions and no
offsets: the store's own bulk path from Python.

CPU per row is this process's (the node's JVM is not counted, on either side). The node is
``$CDC_BENCH_OPENSEARCH_URL`` or a throwaway local one (``LocalOpenSearch``, on this machine:
its CPU competes with the bench's).

Usage: ``python bench/sinks_opensearch.py [--changes N] [--batch B]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opensearchpy import OpenSearch, helpers

# Run as a script, this folder comes first on sys.path, and bench/sinks.py would shadow the
# sinks package: the repository root goes first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures, add_sink, sink_result
from bench.sinks_duckdb import SCHEMA, changes, fill_log, run_sink
from cdc.contracts.events import ChangeEvent, Op
from cdc.envelope.options import READABLE
from cdc.log.embedded import EmbeddedLog
from cdc.support.logging import configure
from sinks.opensearch import OpenSearchSinkConfig
from sinks.opensearch.mappings import properties
from sinks.opensearch.sink import OpenSearchSink


@contextmanager
def server() -> Iterator[str]:
    """The node's URL: ``$CDC_BENCH_OPENSEARCH_URL``, or a throwaway local node."""
    given = os.environ.get("CDC_BENCH_OPENSEARCH_URL")
    if given:
        yield given
        return
    from tests.services.opensearch import LocalOpenSearch

    with LocalOpenSearch(heap="512m") as node:
        node.start()
        yield node.url


def baseline(events: list[ChangeEvent], url: str, batch: int) -> tuple[float, float]:
    """Wall and CPU seconds ``helpers.bulk`` takes to send every change as an action."""
    client = OpenSearch([url], timeout=120)
    index = f"baseline-{uuid.uuid4().hex[:8]}"
    mappings = {"dynamic": False, "properties": properties(SCHEMA, READABLE)}
    client.indices.create(
        index=index, body={"settings": {"number_of_replicas": 0}, "mappings": mappings}
    )
    actions = [
        {"_op_type": "delete", "_index": index, "_id": str(e.key["id"])}
        if e.op is Op.DELETE
        else {"_index": index, "_id": str(e.key["id"]), "_source": e.after}
        for e in events
    ]
    cpu, started = time.process_time(), time.perf_counter()
    helpers.bulk(client, actions, chunk_size=batch, max_chunk_bytes=8 << 20, raise_on_error=False)
    elapsed = time.perf_counter() - started, time.process_time() - cpu
    client.indices.delete(index=index)
    client.close()
    return elapsed


def bench_opensearch(n: int = 200_000, batch: int = 5000) -> dict[str, Any]:
    """Apply ``n`` changes through the sink task and the baseline; returns the figures."""
    events = changes(n)
    with tempfile.TemporaryDirectory(prefix="bench-os-") as tmp, server() as url:
        log = EmbeddedLog(Path(tmp) / "log", durability="normal")
        records = fill_log(log, events)
        base_s, base_cpu = baseline(events, url, batch)
        del events
        gc.collect()
        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        config = OpenSearchSinkConfig(
            name="search",
            url=url,
            index=prefix + "-{pipeline}.{schema}.{table}",
            offsets_index=f"{prefix}-offsets",
            replicas=0,
        )
        sink_s, sink_cpu = run_sink(
            log, "search", lambda context: OpenSearchSink(config, context), records, batch
        )
        log.close()
        client = OpenSearch([url])
        client.indices.delete(index=f"{prefix}-*")
        client.close()
    return sink_result(
        "opensearch", n, (base_s, base_cpu), (sink_s, sink_cpu), records=records, batch=batch
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=5000, help="sink task max_records")
    args = parser.parse_args()
    configure(level="warning")
    r = bench_opensearch(args.changes, args.batch)
    print(
        f"OpenSearch sink: {r['changes']:,} changes ({r['records']:,} records) in {r['sink_s']} s "
        f"through the sink task, batches of {r['batch']}: {r['sink_rows_per_s']:,} rows/s, "
        f"{r['sink_rows_per_cpu_s']:,} rows per CPU-second of this process"
    )
    print(
        f"baseline, helpers.bulk of the same documents: {r['baseline_rows_per_s']:,} rows/s, "
        f"{r['baseline_rows_per_cpu_s']:,} rows per CPU-second"
    )
    print(
        f"ratio sink/baseline: {r['ratio_to_baseline']} "
        f"(per CPU-second {r['cpu_ratio_to_baseline']}); machine: {r['cpus']} CPUs, "
        f"load average {r['load_average_1m']} at the end"
    )
    figures = Figures("sinks_opensearch")
    add_sink(figures, r)
    figures.emit()


if __name__ == "__main__":
    main()
