"""pgoutput decode and row conversion rate, on Insert messages captured from PostgreSQL 15.

Uses the 200 six-column ``bench_rows`` inserts of ``tests/unit/data/pgoutput/v1.json`` (int,
text, text, numeric(10,2), boolean, timestamptz; about 80 bytes each) and times, over
``--rounds`` passes through them:

- ``decode``: :func:`connectors.postgres.pgoutput.decode` alone;
- ``decode+convert``: decode, then the relation's :func:`row_converter` into a row dict
  (what the source does per change before building the event).

Each figure is the best of ``--repeat`` runs, in messages per second on one core.

Usage: ``python bench/pgoutput_decode.py [--rounds N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from bench.report import Figures
from connectors.postgres.pgoutput import Insert, Relation, decode
from connectors.postgres.types import TypeRegistry, row_converter

FIXTURE = Path(__file__).parent.parent / "tests" / "unit" / "data" / "pgoutput" / "v1.json"
TABLE = "bench_rows"


def _load() -> tuple[Relation, list[bytes]]:
    """The bench table's Relation and the raw bytes of its Insert messages."""
    raw = [bytes.fromhex(data) for _, _, data in json.loads(FIXTURE.read_text())["messages"]]
    relation = next(m for m in map(decode, raw) if isinstance(m, Relation) and m.name == TABLE)
    inserts = [
        data
        for data in raw
        if (m := decode(data)).__class__ is Insert and m.relation_oid == relation.oid  # type: ignore[union-attr]
    ]
    return relation, inserts


def _rate(work: Callable[[], None], count: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return count / best


def main() -> None:
    """Print the decode and decode+convert rates."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=500, help="passes over the messages")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the best one counts")
    args = parser.parse_args()
    relation, messages = _load()
    convert = row_converter(relation.columns, TypeRegistry())
    batch = messages * args.rounds

    def decode_only() -> None:
        for data in batch:
            decode(data)

    def decode_and_convert() -> None:
        for data in batch:
            convert(decode(data).new)  # type: ignore[union-attr]

    size = sum(map(len, messages)) / len(messages)
    print(
        f"{len(batch)} Insert messages of {TABLE} ({len(relation.columns)} columns, "
        f"{size:.0f} bytes avg), best of {args.repeat}"
    )
    decoded = _rate(decode_only, len(batch), args.repeat)
    converted = _rate(decode_and_convert, len(batch), args.repeat)
    print(f"  decode:          {decoded:>10,.0f} msg/s")
    print(f"  decode+convert:  {converted:>10,.0f} msg/s")
    print(f"  sample row: {convert(decode(messages[0]).new)}")  # type: ignore[union-attr]
    figures = Figures("pgoutput_decode")  # no baseline: our figures alone
    figures.add("decode_msgs_per_s", decoded)
    figures.add("decode_convert_msgs_per_s", converted)
    figures.emit()


if __name__ == "__main__":
    main()
