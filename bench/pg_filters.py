"""Benchmark: what filters cost the PostgreSQL stream (``python -m bench.pg_stream --filters``).

Streaming: the same backlog (a ``--rows`` INSERT in one transaction, then as many rows updated
in 10,000-row transactions) is streamed by three children, each from its own slot created at
the same point, into its own embedded log:

- ``plain``: the bench table as it is (the baseline);
- ``excluded``: ``columns: {exclude: [tags]}`` (the publication's column list leaves the array
  on the server);
- ``masked``: that, and ``mask: {name: hash}`` (HMAC-SHA256 of each row's ``name``).

Two cores carry the server's walsender, the child and the log's disk writes, so one run's CPU
per row varies by some 10%: the workloads run ``--rounds`` times (3), each round starting the
variants in another order, and the medians are reported.

The hash mask's own cost per row is measured twice: as the masked run's median CPU per row less
the excluded run's (noisy: a difference of two noisy figures), and in-process, exactly, as the
row encoder's time for the bench's rows with and without the hash (native, and the Python
reference the encoder falls back to, ``CDC_NATIVE=0``).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from bench.pg_stream import DDL, INSERT, VARIANTS, execute, run_child
from bench.report import Figures

ORDER = ("plain", "excluded", "masked")
ENCODER_ROWS = 200_000


def prepare(dsn: str) -> None:
    """The bench table, and each variant's publication (its column list) and slot."""
    execute(dsn, DDL)
    for name in ORDER:
        variant = VARIANTS[name]
        execute(dsn, f"CREATE PUBLICATION {variant.pipeline}_pub FOR TABLE bench {variant.columns}")
        execute(
            dsn,
            "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
            (f"{variant.pipeline}_slot",),
        )


def stream_all(dsn: str, tmp: Path, rows: int, round_: int) -> dict[str, dict[str, Any]]:
    """Each variant's run over the backlog written since its last run, started in the round's
    order (each variant first once in three rounds)."""
    order = ORDER[round_ % 3 :] + ORDER[: round_ % 3]
    return {name: run_child(dsn, tmp / name, rows, variant=name) for name in order}


def workloads(dsn: str, tmp: Path, rows: int, rounds: int) -> dict[str, list[dict[str, Any]]]:
    """Every round's runs, by phase: ``insert_one_tx`` then ``update_10k_tx``."""
    runs: dict[str, list[dict[str, Any]]] = {"insert_one_tx": [], "update_10k_tx": []}
    for round_ in range(rounds):
        first = round_ * rows + 1
        execute(dsn, INSERT, (first, first + rows - 1))
        runs["insert_one_tx"].append(stream_all(dsn, tmp, rows, round_))
        with psycopg.connect(dsn, autocommit=True) as conn:
            for low in range(first, first + rows, 10_000):
                conn.execute(
                    "UPDATE bench SET amount = amount + 1, name = name || 'x'"
                    " WHERE id BETWEEN %s AND %s",
                    (low, low + 9_999),
                )
        runs["update_10k_tx"].append(stream_all(dsn, tmp, rows, round_))
    return runs


def report(phase: str, rounds: list[dict[str, dict[str, Any]]], figures: Figures) -> None:
    rate = {n: statistics.median(r[n]["rows"] / r[n]["seconds"] for r in rounds) for n in ORDER}
    cpu_us = {
        n: statistics.median(r[n]["cpu_seconds"] / r[n]["rows"] * 1e6 for r in rounds)
        for n in ORDER
    }
    for name in ORDER:
        print(
            f"{phase:<16} {name:<9} {rate[name]:>9,.0f} rows/s  {cpu_us[name]:5.2f} µs CPU per "
            f"row  ({rate[name] / rate['plain']:.2f}x plain; medians of {len(rounds)} rounds)"
        )
    hash_us = cpu_us["masked"] - cpu_us["excluded"]
    print(f"{phase:<16} hash mask: {hash_us:+.2f} µs CPU per row (masked less excluded)")
    for name in ("excluded", "masked"):
        figures.add(f"{phase}_{name}_rows_per_s", rate[name], rate["plain"])
        figures.add(f"{phase}_{name}_cpu_us_per_row", cpu_us[name], cpu_us["plain"])
    figures.add(f"{phase}_hash_mask_cpu_us_per_row", hash_us)


def encoder_cost(figures: Figures) -> None:
    """The row encoder's time per bench row, with ``name`` hashed and without: native and the
    Python reference. In-process, on the same pgoutput bytes, so the difference is exact."""
    from cdc.transforms.masks import compile_mask
    from connectors.postgres.pgoutput import RelationColumn
    from connectors.postgres.types import TypeRegistry, row_converter, row_encoder
    from connectors.postgres.types.encoder import PythonRowEncoder

    columns = [
        RelationColumn(True, "id", 20, -1),
        RelationColumn(False, "name", 25, -1),
        RelationColumn(False, "amount", 1700, 786438),
        RelationColumn(False, "created", 1184, -1),
        RelationColumn(False, "flag", 16, -1),
    ]
    registry = TypeRegistry()
    messages = [_insert(n) for n in range(1, ENCODER_ROWS + 1)]
    masks = {"name": compile_mask("hash", key=b"bench-mask-key-0123456789abcdef")}
    per_row: dict[str, float] = {}
    for label, masked in (("plain", {}), ("hash", masks)):
        convert = row_converter(columns, registry, masked)
        native = row_encoder.row_encoder(columns, registry, [0], convert, masked)
        python = PythonRowEncoder(convert, ["id"])
        per_row[f"native_{label}"] = _time(native.encode_tuple, messages)
        per_row[f"python_{label}"] = _time(python.encode_tuple, messages)
    for impl in ("native", "python"):
        plain, hashed = per_row[f"{impl}_plain"], per_row[f"{impl}_hash"]
        print(
            f"row encoder, {impl:<6} {plain:5.2f} µs per row plain, {hashed:5.2f} with name "
            f"hashed: the hash mask costs {hashed - plain:+.2f} µs per row"
        )
        figures.add(f"encoder_{impl}_hash_mask_us_per_row", hashed - plain)
        figures.add(f"encoder_{impl}_masked_us_per_row", hashed, plain)


def _insert(n: int) -> bytes:
    """A pgoutput Insert of a bench row (the columns the filtered variants publish)."""
    values = [str(n), f"name-{n}", f"{n * 1.25:.2f}", "2026-12-05 11:00:00+00", "t"]
    data = b"I" + struct.pack(">I", 1) + b"N" + struct.pack(">H", len(values))
    for value in values:
        data += b"t" + struct.pack(">I", len(value)) + value.encode()
    return data


def _time(encode: Any, messages: list[bytes]) -> float:
    """The best of three passes' µs per message."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for message in messages:
            encode(message)
        best = min(best, time.perf_counter() - start)
    return best / len(messages) * 1e6


def main(args: argparse.Namespace) -> None:
    from tests.services.postgres import LocalPostgres

    rows, rounds = args.rows, args.rounds
    figures = Figures("pg_filters")
    encoder_cost(figures)
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(LocalPostgres(settings={"synchronous_commit": "on"}))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdc-bench-")))
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        prepare(dsn)
        print(f"PostgreSQL at {pg.port}; {rows:,} rows per workload, {rounds} rounds")
        for phase, runs in workloads(dsn, tmp, rows, rounds).items():
            report(phase, runs, figures)
    figures.emit()
