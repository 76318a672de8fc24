"""Byte bounds of batches (:mod:`cdc.config.batch_bytes`): the config fields of the sources and
sinks, their errors, and how a sink task sizes its reads
(:class:`cdc.runtime.read_size.ReadSize`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc.config.batch_bytes import BATCH_BYTES
from cdc.config.pipeline import parse
from cdc.contracts.errors import ConfigError
from cdc.log.base import StoredRecord
from cdc.runtime.read_size import FIRST_READ, ReadSize
from tests.unit.pipeline_run_kit import started


def _pipeline(source_extra: str = "", sink_extra: str = "", source: str = "postgres") -> str:
    dsn = "postgresql://h/db" if source == "postgres" else "mongodb://h/?replicaSet=rs0"
    table = "public.t" if source == "postgres" else "shop.t"
    return (
        f"version: 1\nname: shop\nsource:\n  type: {source}\n  dsn: {dsn}\n"
        f"  tables: [{table}]\n{source_extra}log:\n  type: embedded\n  path: log\n"
        "sinks:\n  - name: files\n    type: jsonl\n    path: out\n" + sink_extra
    )


@pytest.mark.parametrize("source", ["postgres", "mongodb"])
def test_the_defaults(source: str) -> None:
    pipeline = parse(_pipeline(source=source))
    assert pipeline.source.max_batch_bytes == BATCH_BYTES  # type: ignore[attr-defined]
    assert pipeline.sinks[0].batch_bytes == BATCH_BYTES == 16 * 1024 * 1024


@pytest.mark.parametrize(
    ("written", "expected"),
    [("8MiB", 8 * 1024 * 1024), ("8 MB", 8_000_000), ("65536", 65536), ("512KiB", 524288)],
)
def test_sizes_with_units(written: str, expected: int) -> None:
    pipeline = parse(_pipeline(f"  max_batch_bytes: {written}\n", f"    batch_bytes: {written}\n"))
    assert pipeline.source.max_batch_bytes == expected  # type: ignore[attr-defined]
    assert pipeline.sinks[0].batch_bytes == expected


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("lots", "must be a size in bytes or with a unit such as 16MiB"),
        ("-5", "must be a size"),
        ("0", "must be between 64KiB and 1GiB"),
        ("1KiB", "must be between 64KiB and 1GiB"),
        ("2GiB", "must be between 64KiB and 1GiB"),
        ("true", "must be a size"),
        ("1.5", "must be a size"),
        ("[1]", "must be a size"),
    ],
)
@pytest.mark.parametrize("source", ["postgres", "mongodb"])
def test_a_bad_size_is_a_config_error_with_its_path(written: str, said: str, source: str) -> None:
    text = _pipeline(f"  max_batch_bytes: {written}\n", f"    batch_bytes: {written}\n", source)
    with pytest.raises(ConfigError) as raised:
        parse(text)
    problems = dict(raised.value.problems)
    assert said in problems["source.max_batch_bytes"]
    assert said in problems["sinks[0].batch_bytes"]


def test_a_misspelt_bound_gets_a_suggestion() -> None:
    with pytest.raises(ConfigError) as raised:
        parse(_pipeline(sink_extra="    batch_byte: 1MiB\n"))
    assert any("batch_bytes" in message for _, message in raised.value.problems)


def test_the_sink_bound_reaches_the_sink_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with started(parse(_pipeline(sink_extra="    batch_bytes: 2MiB\n"))) as run:
        assert run.sink_tasks["files"].read_size.max_bytes == 2 * 1024 * 1024


# -- a sink task's reads ------------------------------------------------------------------------


def _records(count: int, size: int | None) -> list[StoredRecord]:
    value = None if size is None else b"x" * size
    return [StoredRecord("t", 0, i, b"k", value, 0) for i in range(count)]


def test_the_first_read_is_small_then_the_count_while_values_are_small() -> None:
    size = ReadSize(max_records=2000, max_bytes=1 << 20)
    assert size.count == FIRST_READ
    size.read(_records(FIRST_READ, 100))
    assert size.count == 2000


def test_large_values_shrink_the_next_read_to_the_byte_bound_at_once() -> None:
    size = ReadSize(max_records=2000, max_bytes=4 << 20)
    size.read(_records(FIRST_READ, 100))
    assert size.count == 2000
    size.read(_records(10, 1 << 20))  # 1 MiB values: 4 fit the bound
    assert size.count == 4
    size.read(_records(4, 8 << 20))  # one value over the bound still flows, one at a time
    assert size.count == 1
    size.read(_records(1, 100))  # small again: the count comes back at once
    assert size.count == 2000


def test_tombstones_and_empty_reads_leave_the_read_size_as_it_was() -> None:
    size = ReadSize(max_records=2000, max_bytes=1 << 20)
    size.read(_records(FIRST_READ, None))  # tombstones: no value bytes, nothing learnt
    assert size.count == FIRST_READ
    size.read(_records(2, 1 << 20))  # 1 MB values: one a read
    assert size.count == 1
    size.read(_records(1, None))  # the tombstone after a delete of one of them
    assert size.count == 1
    size.read([])
    assert size.count == 1


def test_a_read_of_mixed_values_fits_the_bound_at_their_average() -> None:
    size = ReadSize(max_records=2000, max_bytes=1_000_000)
    mixed: list[Any] = _records(9, 100) + _records(1, 99_100)  # 100,000 bytes in 10 records
    size.read(mixed)
    assert size.count == 100
