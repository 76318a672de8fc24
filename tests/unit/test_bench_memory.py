"""``bench/memory.py``'s own parts: the pipeline file it runs, and how it reads ``/proc``."""

from __future__ import annotations

import os

import pytest

from bench import memory
from cdc.config.pipeline import parse

ENV = {"MEM_PG_DSN": "postgresql://u@127.0.0.1/bench", "MEM_REDIS_URL": "redis://127.0.0.1/0"}


def test_the_bench_pipeline_is_valid_with_every_sink_and_a_setting() -> None:
    text = memory.pipeline_yaml(["duckdb", "redis", "search"], ["warehouse.memory_limit=64MB"])
    pipeline = parse(text, ENV)
    assert [s.type for s in pipeline.sinks] == ["duckdb", "redis", "search"]
    assert pipeline.sinks[0].memory_limit == "64MB"  # type: ignore[attr-defined]


def test_a_setting_can_name_the_sink_by_type() -> None:
    pipeline = parse(memory.pipeline_yaml(["search"], ["search.writer_heap_mb=32"]), ENV)
    assert pipeline.sinks[0].writer_heap_mb == 32  # type: ignore[attr-defined]


def test_a_setting_for_a_sink_not_in_the_run_is_refused() -> None:
    with pytest.raises(SystemExit, match=r"expected SINK\.KEY=VALUE"):
        memory.pipeline_yaml(["redis"], ["warehouse.memory_limit=64MB"])


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("", "anon"),
        ("[heap]", "[heap]"),
        ("[stack:123]", "[stack]"),
        ("/v/lib/python3.11/site-packages/_duckdb.cpython-311-x86_64-linux-gnu.so", "lib:duckdb"),
        ("/v/lib/python3.11/site-packages/tantivy/tantivy.abi3.so", "lib:tantivy"),
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", "file:libc.so.6"),
        ("/tmp/mem-x/out/search/public.bench/0a1b.idx", "data:public.bench"),
    ],
)
def test_mappings_are_labelled_by_what_they_hold(path: str, label: str) -> None:
    assert memory.mapping_label(path) == label


def test_the_breakdown_adds_up_to_the_resident_size() -> None:
    pid = os.getpid()
    rss = memory.status_kb(pid)["VmRSS"]
    total = sum(memory.smaps_breakdown(pid).values())
    assert abs(total - rss) < max(2048, rss // 20)  # read a moment apart


def test_the_peak_can_be_reset() -> None:
    pid = os.getpid()
    grown = b"\x01" * (64 << 20)  # written: 64 MB resident for a moment
    del grown
    before = memory.status_kb(pid)["VmHWM"]
    memory.reset_peak(pid)
    assert memory.status_kb(pid)["VmHWM"] < before
