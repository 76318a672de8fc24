"""CPU a row of the PostgreSQL source's own Python path, without a server or a log.

What a streamed insert costs between the socket and the log, on the 200 captured
``bench_rows`` inserts of ``tests/unit/data/pgoutput/v1.json`` replayed as one large
transaction, a batch taken every ``--batch`` changes as ``poll`` takes them:

- ``records``: the Assembler's ``change_from_bytes`` writing each change's record at once (the
  native row encoder, the record), as ``cdc run``'s source does;
- ``events``, the baseline: an event, its ``source`` and its record for each change, then
  ``batch_records`` as the source task runs it (a caller that reads events).

No server, no socket, no log: the figures move only with this path's code, so two builds
compare within a few percent even on a busy machine (the best of ``--repeat`` runs counts, in
CPU time of this process).

``bench/pg_stream.py`` measures the whole stream against ``pg_recvlogical``; this one isolates
the part the issue-26 profiles blamed (the README's Performance section).

Usage: ``python bench/pg_assemble.py [--rows N] [--batch N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

import structlog

from bench.report import Figures
from cdc.envelope import encode as envelope
from cdc.runtime.pipeline import GC_THRESHOLDS
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.assembler import Assembler
from connectors.postgres.assembly.toast import ToastFiller
from connectors.postgres.catalog import TableInfo
from connectors.postgres.types import TypeRegistry

FIXTURE = Path(__file__).parent.parent / "tests" / "unit" / "data" / "pgoutput" / "v1.json"
TABLE = "bench_rows"
PIPELINE = "bench"


class _Catalog:
    """The catalog lookups of a table whose types are built in and whose rows are whole (no
    unchanged TOAST value is ever read back here)."""

    def load_types(self, registry: TypeRegistry, oids: Sequence[int]) -> None:
        return None

    def not_null(self, oid: int) -> set[str]:
        return {"id"}

    def array_dims(self, oid: int) -> dict[str, int]:
        return {}

    def read_row(self, *args: Any) -> None:
        return None

    def toastable_columns(self, schema: str, table: str) -> list[str]:
        return []


class _Log:
    """The latest-image lookups the TOAST filler may ask of a log: none are needed here."""

    def keep_latest(self, fields: dict[str, list[str]]) -> None:
        return None

    def latest_value(self, topic: str, key: bytes) -> bytes | None:
        return None


def _messages() -> tuple[pg.Relation, list[bytes]]:
    """The bench table's Relation and its Insert messages, as they came off the wire."""
    raw = [bytes.fromhex(data) for _, _, data in json.loads(FIXTURE.read_text())["messages"]]
    relation = next(m for m in map(pg.decode, raw) if type(m) is pg.Relation and m.name == TABLE)
    inserts = [
        data
        for data in raw
        if isinstance(m := pg.decode(data), pg.Insert) and m.relation_oid == relation.oid
    ]
    return relation, inserts


def _assembler(relation: pg.Relation, write_records: bool) -> Assembler:
    keys = tuple(c.name for c in relation.columns if c.is_key)
    name = relation.namespace, relation.name
    info = TableInfo(*name, relation.oid, relation.replica_identity, keys)
    logger = structlog.get_logger()
    toast = ToastFiller(_Log(), logger)  # type: ignore[arg-type]
    tables = {name: info}
    return Assembler(
        PIPELINE,
        "bench",
        tables,
        {},
        _Catalog(),
        toast,
        "fail",
        logger,
        write_records=write_records,
    )


def _run(relation: pg.Relation, inserts: list[bytes], rows: int, batch: int, write: bool) -> float:
    """Stream ``rows`` inserts in one transaction; returns CPU seconds a row."""
    asm = _assembler(relation, write)
    asm.handle(relation, 0)
    asm.handle(pg.Begin(final_lsn=1 << 40, commit_ts_us=0, xid=7), 0)
    records, lsn, done = 0, 1 << 32, 0
    started = time.process_time()
    while done < rows:
        for data in inserts:
            lsn += 64
            if not asm.change_from_bytes(data, lsn):
                asm.handle(pg.decode(data), lsn)
            if asm.pending >= batch:
                taken = asm.take()
                now_ms = int(time.time() * 1000)
                records += len(taken.records)
                records += len(envelope.batch_records(taken.events, PIPELINE, now_ms))
        done += len(inserts)
    spent = time.process_time() - started
    if records < rows - batch:
        raise RuntimeError(f"{records} records for {rows} rows: the path did not run")
    return spent / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000, help="inserts a run")
    parser.add_argument("--batch", type=int, default=5_000, help="changes a poll takes")
    parser.add_argument("--repeat", type=int, default=7, help="runs; the best one counts")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    gc.set_threshold(*GC_THRESHOLDS)  # as `cdc run` does
    relation, inserts = _messages()
    figures = Figures("pg_assemble")  # the event path is the baseline of the written records
    best = {}
    for path, write in (("events", False), ("records", True)):
        runs = [_run(relation, inserts, args.rows, args.batch, write) for _ in range(args.repeat)]
        best[path] = min(runs)
        print(
            f"{args.rows:,} inserts of {TABLE} ({len(relation.columns)} columns), {path:>7}, "
            f"best of {args.repeat}: {best[path] * 1e6:.2f} us CPU a row, "
            f"{1 / best[path]:,.0f} rows per CPU-s (no server, no log)"
        )
    figures.add("us_cpu_per_row", best["records"] * 1e6, best["events"] * 1e6)
    figures.add("rows_per_cpu_s", 1 / best["records"], 1 / best["events"])
    figures.emit()


if __name__ == "__main__":
    main()
