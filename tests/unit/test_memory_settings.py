"""Memory settings (issue 26, 3.5): the allocator's arenas and idle trim
(:mod:`cdc.runtime.memory`), the embedded log's reader cache, and the DuckDB sink's settings
validated and reaching DuckDB (``bench/memory.py`` measures what they save)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from cdc.config.pipeline import parse
from cdc.contracts.errors import ConfigError
from cdc.contracts.sink import SinkContext
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded import store as embedded_store
from cdc.log.embedded.consumer import READER_CACHE
from cdc.runtime import memory
from cdc.support.logging import get_logger
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig
from tests.unit.pipeline_run_kit import started

TOPIC = "shop.public.customers"


# -- cdc.runtime.memory ------------------------------------------------------------------------


def test_trim_when_idle_trims_once_each_time_progress_stands_still() -> None:
    stop = threading.Event()
    readings = iter([0, 5, 5, 5, 5, 9, 9, 12])
    trims: list[int] = []
    seen: list[int] = []

    def progress() -> int:
        value = next(readings, None)
        if value is None:  # the readings are over: stop, on a reading that moved
            stop.set()
            return seen[-1] + 1
        seen.append(value)
        return value

    memory.trim_when_idle(stop, progress, interval_s=0.001, release=lambda: trims.append(seen[-1]))
    # 0 -> 5 moved; 5 stood still: trim once, not again while it stays; 9 moved, then stood
    # still: trim; 12 moved.
    assert trims == [5, 9]


def test_limit_arenas_leaves_an_environment_setting_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert memory.limit_arenas() is False


def test_limit_arenas_sets_glibcs_arena_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert memory.limit_arenas() is True  # this machine's C library is glibc


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_trim_hands_back_the_holes_freed_memory_leaves() -> None:
    # Blocks small enough for malloc's heap; every 20th kept, so the freed ones are holes that
    # free() cannot give back by itself (only the heap's top is returned automatically).
    blocks = [bytearray(4000) for _ in range(25_000)]
    kept = blocks[::20]
    del blocks
    before = _rss_kb()
    assert memory.trim() is True
    assert before - _rss_kb() > 40_000, "trim released less than 40 MB of ~95 MB of holes"
    assert len(kept) == 1250


# -- the embedded log's reader cache ----------------------------------------------------------


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EmbeddedLog]:
    opened = EmbeddedLog(tmp_path / "log")
    yield opened
    opened.close()


def _cache_size(log: EmbeddedLog) -> Any:
    """``cache_size`` of the calling thread's connection to ``log``."""
    return log._state.connections.get().execute("PRAGMA cache_size").fetchone()[0]


def test_a_consumers_thread_gets_the_small_reader_cache(log: EmbeddedLog) -> None:
    log.ensure_topics([TOPIC])
    sizes: dict[str, int] = {}

    def consume() -> None:
        consumer = log.consumer("shop.sink.cache", [TOPIC])
        sizes["reader"] = _cache_size(log)
        consumer.close()

    thread = threading.Thread(target=consume)
    thread.start()
    thread.join()
    assert f"cache_size = {sizes['reader']}" in READER_CACHE
    assert sizes["reader"] == -4096
    # The writer's thread keeps the cache a large source transaction spills from.
    assert _cache_size(log) == -embedded_store.CACHE_KIB


# -- the DuckDB sink's settings ---------------------------------------------------------------


def _duckdb_pipeline(extra: str) -> str:
    return (
        "version: 1\nname: shop\nsource:\n  type: postgres\n  dsn: postgresql://h/db\n"
        "  tables: [public.t]\nsinks:\n  - name: wh\n    type: duckdb\n    path: wh.duckdb\n"
        + extra
    )


@pytest.mark.parametrize("value", ["lots", "64", "-1GB", "64 MBs"])
def test_a_memory_limit_duckdb_cannot_read_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse(_duckdb_pipeline(f"    memory_limit: '{value}'\n"))
    assert any(path == "sinks[0].memory_limit" for path, _ in raised.value.problems)


@pytest.mark.parametrize("value", ["64MB", "64MiB", "0.5GB", "1 GiB", "80%", "512kb"])
def test_memory_limits_duckdb_reads_are_valid(value: str) -> None:
    assert DuckDBSinkConfig(name="wh", path="x.duckdb", memory_limit=value).memory_limit == value


@pytest.mark.parametrize("value", ["lots", "10%", "-1GB"])
def test_a_checkpoint_threshold_duckdb_cannot_read_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse(_duckdb_pipeline(f"    checkpoint_threshold: '{value}'\n"))
    assert any(path == "sinks[0].checkpoint_threshold" for path, _ in raised.value.problems)


def test_a_checkpoint_threshold_reaches_duckdb(tmp_path: Path) -> None:
    config = DuckDBSinkConfig(
        name="wh", path=str(tmp_path / "wh.duckdb"), checkpoint_threshold="256MB"
    )
    context = SinkContext("shop", "wh", [], None, get_logger(sink="wh"))  # type: ignore[arg-type]
    sink = DuckDBSink(config, context)
    sink.open()
    try:
        [threshold] = sink._con.execute("SELECT current_setting('checkpoint_threshold')").fetchone()
    finally:
        sink.close()
    assert threshold == "244.1 MiB"  # 256 MB, as DuckDB prints it


def test_threads_must_be_positive() -> None:
    with pytest.raises(ValidationError):
        DuckDBSinkConfig(name="wh", path="x.duckdb", threads=0)


def _opened_settings(tmp_path: Path, **options: Any) -> tuple[str, int]:
    config = DuckDBSinkConfig(name="wh", path=str(tmp_path / "wh.duckdb"), **options)
    context = SinkContext("shop", "wh", [], None, get_logger(sink="wh"))  # type: ignore[arg-type]
    sink = DuckDBSink(config, context)
    sink.open()
    try:
        row = sink._con.execute(
            "SELECT current_setting('memory_limit'), current_setting('threads')"
        ).fetchone()
    finally:
        sink.close()
    return str(row[0]), int(row[1])


def test_the_settings_reach_duckdb(tmp_path: Path) -> None:
    assert _opened_settings(tmp_path, memory_limit="96MiB", threads=1) == ("96.0 MiB", 1)


def test_the_default_memory_limit_reaches_duckdb(tmp_path: Path) -> None:
    limit, _ = _opened_settings(tmp_path)
    default = DuckDBSinkConfig(name="wh", path="x.duckdb").memory_limit
    assert default is not None, "the sink has a documented default, not DuckDB's 80% of RAM"
    assert limit == default.replace("MiB", ".0 MiB")


# -- a sink's batch ---------------------------------------------------------------------------


def _jsonl_pipeline(extra: str = "") -> str:
    return (
        "version: 1\nname: shop\nsource:\n  type: postgres\n  dsn: postgresql://h/db\n"
        "  tables: [public.t]\nlog:\n  type: embedded\n  path: log\n"
        "sinks:\n  - name: files\n    type: jsonl\n    path: out\n" + extra
    )


@pytest.mark.parametrize("value", [0, -5, 1_000_000, "many"])
def test_a_batch_size_out_of_range_is_a_config_error(value: Any) -> None:
    with pytest.raises(ConfigError) as raised:
        parse(_jsonl_pipeline(f"    batch_records: {value}\n"))
    assert any(path == "sinks[0].batch_records" for path, _ in raised.value.problems)


def test_a_misspelt_batch_size_gets_a_suggestion() -> None:
    with pytest.raises(ConfigError) as raised:
        parse(_jsonl_pipeline("    batch_record: 500\n"))
    assert any("batch_records" in message for _, message in raised.value.problems)


@pytest.mark.parametrize(("extra", "expected"), [("", 2000), ("    batch_records: 750\n", 750)])
def test_the_batch_size_reaches_the_sink_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str, expected: int
) -> None:
    monkeypatch.chdir(tmp_path)
    with started(parse(_jsonl_pipeline(extra))) as run:
        assert run.sink_tasks["files"].read_size.max_records == expected
