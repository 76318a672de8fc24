"""DuckDB sink throughput against DuckDB's own bulk insert of the same rows.

Appends N changes of a 6-column table (``bigint`` key, ``text``, ``integer``, ``numeric(12,2)``,
``timestamptz``, ``boolean``) to a real :class:`~cdc.log.embedded.EmbeddedLog`: about 80%
inserts, 15% updates and 5% deletes (each delete followed by its tombstone), with the table's
schema on the schema topic. Then the real :class:`~cdc.runtime.sink_task.SinkTask` applies them
to a DuckDB file (poll, decode, write, flush in one transaction with the offsets, commit the
consumer offsets), timed from start to the last committed offset.

The baseline, in the same run: every change's row bulk-inserted by DuckDB into a plain typed
table through its fastest plain path found here (no pandas or pyarrow installed):
``read_json`` over a newline-delimited file with the column types given, timed including
writing the file. Also shown: the same rows through ``from_json`` on one in-memory parameter
(the path the sink stages with).

Usage: ``python bench/sinks_duckdb.py [--changes N] [--batch B]``.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import orjson

# Run as a script, this folder comes first on sys.path, and bench/sinks.py would shadow the
# sinks package: the repository root goes first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures, add_sink, sink_result
from cdc.contracts.events import ChangeEvent, Op, SourceInfo, topic_name
from cdc.contracts.schema import Column, TableSchema, schema_record
from cdc.contracts.sink import Sink, SinkContext
from cdc.envelope import encode as envelope
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.support.logging import configure, get_logger
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig

PIPELINE = "bench"
TABLE = ("public", "orders")
TOPIC = topic_name(PIPELINE, *TABLE)
TARGET = 50_000
SCHEMA = TableSchema(
    "postgresql",
    *TABLE,
    columns=(
        Column("id", "bigint", key=True, nullable=False),
        Column("customer", "text"),
        Column("qty", "integer"),
        Column("amount", "numeric(12,2)"),
        Column("updated_at", "timestamp with time zone"),
        Column("paid", "boolean"),
    ),
)
BASELINE_DDL = (
    "CREATE TABLE orders (id BIGINT, customer VARCHAR, qty INTEGER, amount DECIMAL(12,2), "
    "updated_at TIMESTAMPTZ, paid BOOLEAN)"
)
BASELINE_COLUMNS = (
    "{id: 'BIGINT', customer: 'VARCHAR', qty: 'INTEGER', amount: 'DECIMAL(12,2)', "
    "updated_at: 'TIMESTAMPTZ', paid: 'BOOLEAN'}"
)


def changes(n: int, seed: int = 7) -> list[ChangeEvent]:
    """``n`` changes: mostly inserts of new keys, some updates and deletes of live keys."""
    rng = random.Random(seed)
    live: list[int] = []
    out = []
    for i in range(n):
        roll = rng.random()
        pos = 1_000_000 + i
        if live and roll < 0.05:
            key = live.pop(rng.randrange(len(live)))
            out.append(_event(Op.DELETE, key, None, pos))
            continue
        if live and roll < 0.20:
            key, op = live[rng.randrange(len(live))], Op.UPDATE
        else:
            key, op = i + 1, Op.CREATE
            live.append(key)
        out.append(_event(op, key, _row(key, i, rng), pos))
    return out


def _row(key: int, i: int, rng: random.Random) -> dict[str, Any]:
    return {
        "id": key,
        "customer": f"customer {rng.randrange(10_000)}",
        "qty": rng.randrange(1, 100),
        "amount": f"{rng.randrange(100_000)}.{rng.randrange(100):02d}",
        "updated_at": f"2024-03-{1 + i % 28:02d}T12:{i % 60:02d}:00.{i % 1000:03d}Z",
        "paid": i % 3 == 0,
    }


def _event(op: Op, key: int, row: dict[str, Any] | None, pos: int) -> ChangeEvent:
    source = SourceInfo("postgresql", "bench", *TABLE, 1_700_000_000_000 + pos, pos, 0)
    before = {"id": key} if op is Op.DELETE else None
    return ChangeEvent(op, {"id": key}, before, row, source)


def fill_log(log: EmbeddedLog, events: list[ChangeEvent], chunk: int = 20_000) -> int:
    """Append the events (and the schema) in transactions of ``chunk``; returns records."""
    log.ensure_topics([TOPIC])
    tx = log.begin()
    tx.append([schema_record(PIPELINE, SCHEMA)])
    tx.commit()
    total = 0
    for start in range(0, len(events), chunk):
        records = [
            r for e in events[start : start + chunk] for r in envelope.to_records(e, PIPELINE, 0)
        ]
        tx = log.begin()
        tx.append(records)
        tx.commit()
        total += len(records)
    return total


def run_sink(
    log: EmbeddedLog,
    name: str,
    make: Callable[[SinkContext], Sink],
    records: int,
    batch: int,
    cpu: Callable[[], float] = time.process_time,
) -> tuple[float, float]:
    """Wall and CPU seconds the real sink task takes to apply and commit ``records`` records."""
    stop = threading.Event()
    task = _sink_task(log, name, make, batch, stop)
    errors: list[BaseException] = []

    def body() -> None:
        try:
            task.run()
        except BaseException as exc:
            errors.append(exc)

    started, cpu_started = time.perf_counter(), cpu()
    thread = threading.Thread(target=body)
    thread.start()
    while sum(log.committed_offsets(group_name(PIPELINE, name)).values()) < records:
        if errors:
            raise errors[0]
        time.sleep(0.005)
    elapsed, cpu_s = time.perf_counter() - started, cpu() - cpu_started
    stop.set()
    thread.join()
    return elapsed, cpu_s


def _sink_task(
    log: EmbeddedLog,
    name: str,
    make: Callable[[SinkContext], Sink],
    batch: int,
    stop: threading.Event,
) -> SinkTask:
    context = SinkContext(PIPELINE, name, [TABLE], SchemaCatalog(log, PIPELINE), get_logger())
    return SinkTask(
        PIPELINE,
        name,
        log,
        lambda: make(context),
        [TOPIC],
        stop,
        get_logger(),
        max_records=batch,
        poll_timeout_s=0.05,
    )


def baseline(events: list[ChangeEvent], directory: Path) -> dict[str, float]:
    """Seconds (wall and CPU) DuckDB takes to bulk-insert every change's row, two plain ways."""
    rows = [e.after or e.key for e in events]
    con = duckdb.connect(str(directory / "baseline.duckdb"))
    con.execute(BASELINE_DDL)
    cpu, started = time.process_time(), time.perf_counter()
    ndjson = directory / "rows.ndjson"
    ndjson.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    con.execute(
        f"INSERT INTO orders SELECT * FROM read_json('{ndjson}', format = 'newline_delimited', "
        f"columns = {BASELINE_COLUMNS})"
    )
    read_json_s, read_json_cpu = time.perf_counter() - started, time.process_time() - cpu
    con.execute("DELETE FROM orders")
    cpu, started = time.process_time(), time.perf_counter()
    con.execute(
        f"INSERT INTO orders SELECT * FROM (SELECT unnest(from_json(?, '[{_spec()}]'), "
        "recursive := true))",
        [orjson.dumps(rows).decode()],
    )
    from_json_s, from_json_cpu = time.perf_counter() - started, time.process_time() - cpu
    con.close()
    return {
        "read_json_s": read_json_s,
        "from_json_s": from_json_s,
        "read_json_cpu_s": read_json_cpu,
        "from_json_cpu_s": from_json_cpu,
    }


def _spec() -> str:
    return (
        BASELINE_COLUMNS.replace("'", '"')
        .replace("{", '{"')
        .replace(", ", ', "')
        .replace(": ", '": ')
    )


def bench_duckdb(n: int = 500_000, batch: int = 5000) -> dict[str, Any]:
    """Apply ``n`` changes through the sink task and the baseline; returns the figures."""
    events = changes(n)
    with tempfile.TemporaryDirectory(prefix="bench-duckdb-") as tmp:
        directory = Path(tmp)
        log = EmbeddedLog(directory / "log", durability="normal")
        records = fill_log(log, events)
        base = baseline(events, directory)
        # The sink runs in a process that does not hold N events: a sink runner's heap holds one
        # batch, and the garbage collector's full passes scale with everything alive.
        del events
        gc.collect()
        config = DuckDBSinkConfig(name="wh", path=str(directory / "wh.duckdb"))
        sink_s, sink_cpu_s = run_sink(
            log, "wh", lambda context: DuckDBSink(config, context), records, batch
        )
        log.close()
    return _figures(n, records, batch, base, sink_s, sink_cpu_s)


def _figures(
    n: int, records: int, batch: int, base: dict[str, float], sink_s: float, sink_cpu_s: float
) -> dict[str, Any]:
    """The sink's rates beside the better of the two baselines."""
    best = min(base["read_json_s"], base["from_json_s"])
    best_cpu = min(base["read_json_cpu_s"], base["from_json_cpu_s"])
    return sink_result(
        "duckdb",
        n,
        (best, best_cpu),
        (sink_s, sink_cpu_s),
        TARGET,
        records=records,
        batch=batch,
        baseline_read_json_rows_per_s=round(n / base["read_json_s"]),
        baseline_from_json_rows_per_s=round(n / base["from_json_s"]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=5000, help="sink task max_records")
    args = parser.parse_args()
    configure(level="warning")
    r = bench_duckdb(args.changes, args.batch)
    print(
        f"DuckDB sink: {r['changes']:,} changes ({r['records']:,} records) in {r['sink_s']} s "
        f"through the sink task, batches of {r['batch']}: {r['sink_rows_per_s']:,} rows/s "
        f"(target {TARGET:,}: {'met' if r['target_met'] else 'NOT met'})"
    )
    print(
        f"  CPU: {r['sink_cpu_s']} s in this process (DuckDB's threads included): "
        f"{r['sink_rows_per_cpu_s']:,} rows per CPU-second"
    )
    print(
        f"baseline, DuckDB bulk insert of the same rows: {r['baseline_rows_per_s']:,} rows/s "
        f"(read_json file {r['baseline_read_json_rows_per_s']:,}, from_json "
        f"{r['baseline_from_json_rows_per_s']:,})"
    )
    print(
        f"ratio sink/baseline: {r['ratio_to_baseline']} (per CPU-second: "
        f"{r['sink_rows_per_cpu_s']:,} vs {r['baseline_rows_per_cpu_s']:,}, "
        f"{r['cpu_ratio_to_baseline']})"
    )
    print(f"(machine: {r['cpus']} CPUs, load average {r['load_average_1m']} at the end of the run)")
    figures = Figures("sinks_duckdb")
    add_sink(figures, r)
    figures.emit()


if __name__ == "__main__":
    main()
