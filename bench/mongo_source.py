"""MongoDB source figures: snapshot documents/s and streamed events/s against a server
(``CDC_TEST_MONGO_URI``, else a private mongo-java-server), and the connector's own conversion
rate on hand-built change events (no server: what the source costs per event).

    python bench/mongo_source.py [--docs 50000] [--events 5000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bson import Decimal128, Int64, ObjectId, Timestamp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures
from cdc.envelope import encode as envelope
from connectors.mongodb import changes
from tests.integration.mongo_kit import database, harness


def sample(n: int) -> dict[str, Any]:
    return {
        "_id": n,
        "oid": ObjectId(),
        "name": f"customer {n}",
        "amount": Decimal128(f"{n}.25"),
        "count": Int64(n * 3),
        "when": dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=n),
        "tags": ["a", "b", n],
        "address": {"city": "Lyon", "zip": f"{69000 + n % 10}"},
    }


def conversion_rate(count: int) -> float:
    captured = {("shop", "orders")}
    events = [
        {
            "_id": {"_data": f"{n:016X}"},
            "operationType": "update",
            "clusterTime": Timestamp(1_700_000_000, n + 1),
            "ns": {"db": "shop", "coll": "orders"},
            "documentKey": {"_id": n},
            "fullDocument": sample(n),
        }
        for n in range(count)
    ]
    started = time.perf_counter()
    for event in events:
        for change in changes.convert(event, captured, 0).events:
            envelope.to_records(change, "bench")
    return count / (time.perf_counter() - started)


def server_rates(uri: str, docs: int, events: int) -> tuple[float, float]:
    with database(uri) as db, tempfile.TemporaryDirectory() as tmp:
        db.orders.insert_many([sample(n) for n in range(docs)])
        time.sleep(1.1)  # mongo-java-server's start point is to the second: skip the load's
        table = f"{db.name}.orders"
        scope = "auto" if os.environ.get("CDC_TEST_MONGO_URI") else "collection"
        opts = {"stream_scope": scope, "snapshot_range_docs": 10_000}
        with harness(uri, Path(tmp), [table], snapshot="initial", **opts) as h:
            started = time.perf_counter()
            h.open()
            h.run_until(lambda: "last_snapshot" in h.stored(), 600)
            snapshot = docs / (time.perf_counter() - started)
            h.events.clear()
            db.changes.insert_many([{"_id": n} for n in range(1)])  # warm the stream
            db.orders.insert_many([sample(docs + n) for n in range(events)])
            started = time.perf_counter()
            h.collect(events, 600)
            stream = events / (time.perf_counter() - started)
    return snapshot, stream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--events", type=int, default=5_000)
    args = parser.parse_args()
    figures = Figures("mongo_source")  # no baseline: our figures alone
    conversion = conversion_rate(20_000)
    print(f"conversion (no server): {conversion:,.0f} events/s")
    uri = os.environ.get("CDC_TEST_MONGO_URI")
    server = None
    if not uri:
        from tests.services.mongo import LocalMongo

        server = LocalMongo(heap="1g")
        server.start()
        uri = server.uri
    try:
        snapshot, stream = server_rates(uri, args.docs, args.events)
    finally:
        if server is not None:
            server.close()
    where = "real server" if os.environ.get("CDC_TEST_MONGO_URI") else "mongo-java-server"
    print(f"snapshot ({where}): {args.docs:,} documents, {snapshot:,.0f} docs/s")
    print(f"stream ({where}): {args.events:,} inserts, {stream:,.0f} events/s")
    figures.add("conversion_events_per_s", conversion)
    figures.add("snapshot_docs_per_s", snapshot)
    figures.add("stream_events_per_s", stream)
    figures.emit()


if __name__ == "__main__":
    main()
