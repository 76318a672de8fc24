"""``cdc run`` with a probe inside: where the memory of ``bench/memory.py --probe`` goes.

``python -m bench.memory_probe FILE [--trace]`` runs ``cdc run FILE``; each SIGUSR1 appends one
JSON line to ``probe.jsonl`` in the working directory with what each allocator holds:

- ``malloc``: glibc's ``mallinfo2`` — bytes in use (``in_use_kb``, small blocks and mmapped
  ones) and bytes free but kept by its arenas (``free_kb``: fragmentation the system does not
  get back until ``malloc_trim``);
- ``sqlite``: SQLite's own allocator (``sqlite3_memory_used``: the embedded log's page caches,
  every connection's), and its high-water mark since the last line;
- ``pymalloc``: Python's object arenas (1 MiB each, handed back only when empty) and the bytes
  their objects use;
- ``duckdb``: each DuckDB sink's buffer manager by tag (``duckdb_memory()``) and its
  ``memory_limit``;
- ``python`` (``--trace`` only, slow): the Python objects' size now and at most since the last
  line (:mod:`tracemalloc`), and the top allocation sites.

Tantivy has no such call: its share is what the search sink's run adds (``--sinks search``).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import signal
import sys
from typing import Any

import orjson

OUT = "probe.jsonl"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_figures() -> dict[str, int]:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return {
        "in_use_kb": (info.uordblks + info.hblkhd) // 1024,
        "free_kb": info.fordblks // 1024,
        "mmapped_kb": info.hblkhd // 1024,
    }


def sqlite_figures() -> dict[str, int]:
    import sqlite3  # noqa: F401  (the module's library is the one loaded)

    lib = ctypes.CDLL("libsqlite3.so.0")
    lib.sqlite3_memory_used.restype = ctypes.c_int64
    lib.sqlite3_memory_highwater.restype = ctypes.c_int64
    return {
        "in_use_kb": lib.sqlite3_memory_used() // 1024,
        "highwater_kb": lib.sqlite3_memory_highwater(1) // 1024,  # and reset it
    }


def pymalloc_figures() -> dict[str, int]:
    """Python's small-object allocator: its arenas (1 MiB mmaps, freed only when empty) and the
    bytes in their used blocks, from ``sys._debugmallocstats`` (written to fd 2)."""
    import os
    import re
    import tempfile

    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    found = dict(
        re.findall(
            r"^# (arenas allocated current|bytes in allocated blocks)\s*=\s*([\d,]+)", text, re.M
        )
    )
    return {
        "arenas_kb": int(found.get("arenas allocated current", "0").replace(",", "")) * 1024,
        "used_kb": int(found.get("bytes in allocated blocks", "0").replace(",", "")) // 1024,
    }


def duckdb_figures() -> list[dict[str, Any]]:
    """Each open DuckDB sink's buffer manager, through a cursor of its own connection."""
    found = []
    for sink in [o for o in gc.get_objects() if type(o).__name__ == "DuckDBSink"]:
        con = getattr(sink, "_con", None)
        if con is None:
            continue
        cursor = con.cursor()
        try:
            tags = cursor.execute(
                "SELECT tag, memory_usage_bytes // 1024 FROM duckdb_memory() "
                "WHERE memory_usage_bytes > 0 ORDER BY 2 DESC"
            ).fetchall()
            limit = cursor.execute("SELECT current_setting('memory_limit')").fetchone()
        finally:
            cursor.close()
        found.append({"memory_limit": limit[0] if limit else None, "tags_kb": dict(tags)})
    return found


def python_figures() -> dict[str, Any] | None:
    import tracemalloc

    if not tracemalloc.is_tracing():
        return None
    current, peak = tracemalloc.get_traced_memory()
    top = tracemalloc.take_snapshot().statistics("lineno")[:10]
    tracemalloc.reset_peak()
    return {
        "current_kb": current // 1024,
        "peak_kb": peak // 1024,
        "top": [(str(s.traceback[0]), s.size // 1024, s.count) for s in top],
    }


def dump(_signum: int, _frame: Any) -> None:
    line = {
        "malloc": malloc_figures(),
        "sqlite": sqlite_figures(),
        "pymalloc": pymalloc_figures(),
        "duckdb": duckdb_figures(),
        "python": python_figures(),
    }
    with open(OUT, "ab") as out:
        out.write(orjson.dumps(line) + b"\n")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.memory_probe",
        description="cdc run FILE with a probe inside: each SIGUSR1 appends a line to "
        f"{OUT} (what bench/memory.py --probe reads).",
    )
    parser.add_argument("file", help="the pipeline file")
    parser.add_argument("--trace", action="store_true", help="Python objects too (slow)")
    args = parser.parse_args(argv)
    if args.trace:
        import tracemalloc

        tracemalloc.start(1)
    from cdc.cli.main import main as cli

    signal.signal(signal.SIGUSR1, dump)
    cli(["run", args.file])


def summary(line: dict[str, Any]) -> str:
    """One probe line in a sentence."""
    malloc, sqlite = line["malloc"], line["sqlite"]
    parts = [
        f"malloc in use {malloc['in_use_kb'] / 1024:.0f} MB, free in its arenas "
        f"{malloc['free_kb'] / 1024:.0f} MB",
        f"SQLite {sqlite['in_use_kb'] / 1024:.0f} MB (high {sqlite['highwater_kb'] / 1024:.0f})",
    ]
    pymalloc = line["pymalloc"]
    parts.append(
        f"Python's object arenas {pymalloc['arenas_kb'] / 1024:.0f} MB "
        f"({pymalloc['used_kb'] / 1024:.0f} MB in objects)"
    )
    for duck in line["duckdb"]:
        total = sum(duck["tags_kb"].values())
        parts.append(f"DuckDB buffers {total / 1024:.0f} MB of {duck['memory_limit']}")
    python = line["python"]
    if python is not None:
        parts.append(
            f"Python objects {python['current_kb'] / 1024:.0f} MB "
            f"(at most {python['peak_kb'] / 1024:.0f} since the last look)"
        )
    return "; ".join(parts)


if __name__ == "__main__":
    main(sys.argv[1:])
