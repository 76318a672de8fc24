"""The parts of ``cdc sink --rebuild`` that need no server: the catch-up display, the reader of
a copy (over a real embedded log), and where ``--into`` places a copy."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from cdc.log.base import Record, TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.catch_up import CatchUp
from cdc.runtime.log_replay import ReplayLog
from cdc.runtime.rebuild_into import CopyRefused, copy_config
from cdc.support.logging import get_logger
from sinks.duckdb import DuckDBSinkConfig, DuckDBSinkPlugin
from sinks.http.plugin import HttpSinkPlugin
from sinks.postgres.plugin import PostgresSinkPlugin

A, B = TopicPartition("p.public.a", 0), TopicPartition("p.public.b", 0)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_catch_up_reports_rate_and_eta_then_finishes_once() -> None:
    clock = _Clock()
    with capture_logs() as logs:
        catch = CatchUp(get_logger(), {A: 1000}, {A: 5000, B: 2000}, clock=clock)
        assert catch.total == 6000
        clock.now = 6.0
        catch.note({A: 3000})  # 2,000 of 6,000 in 6 s
        clock.now = 7.0
        catch.note({A: 3500})  # under 5 s since the last line: no line
        clock.now = 12.0
        catch.note({A: 9999, B: 2000})  # past the end counts as the end
        catch.note({A: 10_000})
    events = [e["event"] for e in logs]
    assert events == ["sink.catch_up.started", "sink.catch_up.progress", "sink.catch_up.finished"]
    progress = logs[1]
    assert progress["records_read"] == 2000 and progress["records_per_s"] == pytest.approx(333.3)
    assert progress["eta_s"] == pytest.approx(12.0) and progress["percent"] == pytest.approx(33.3)
    assert logs[2]["records"] == 6000 and catch.done


def test_catch_up_stays_quiet_when_barely_behind() -> None:
    with capture_logs() as logs:
        catch = CatchUp(get_logger(), {A: 10}, {A: 20})
        catch.note({A: 20})
    assert logs == [] and catch.done


def _log(tmp_path: Path) -> EmbeddedLog:
    log = EmbeddedLog(tmp_path / "log", partitions=2)
    log.ensure_topics(["p.public.a"])
    with log.begin() as tx:
        tx.append([Record("p.public.a", b'{"id": %d}' % i, b"x" * 100) for i in range(40)])
    return log


def test_the_copy_reader_reads_from_the_copy_offsets_to_the_end_at_its_start(
    tmp_path: Path,
) -> None:
    log = _log(tmp_path)
    finished = threading.Event()
    replay = ReplayLog(log, finished)
    ends = {p: e for p, e in log.end_offsets("p.public.a").items()}
    start = {TopicPartition("p.public.a", 0): 3}
    reader = replay.as_log().consumer("ignored", ["p.public.a"], start_offsets=lambda tps: start)
    with log.begin() as tx:  # after the start: not read
        tx.append([Record("p.public.a", b'{"id": 99}', b"late")])
    read: list[tuple[int, int]] = []
    while batch := reader.poll(7, 0.1, max_bytes=350):
        assert len(batch) <= 4  # about 350 bytes of 100-byte values
        read += [(r.partition, r.offset) for r in batch]
    assert finished.is_set()
    want = [(p, o) for p in sorted(ends) for o in range(3 if p == 0 else 0, ends[p])]
    assert read == want
    assert replay.as_log().committed_offsets("ignored") == {}
    log.close()


def test_into_places_a_copy_by_the_plugin_fields(tmp_path: Path) -> None:
    wh = DuckDBSinkConfig(name="wh", path=str(tmp_path / "wh.duckdb"))
    copy = copy_config(DuckDBSinkPlugin, wh, (str(tmp_path / "c.duckdb"),))
    assert copy.path == str(tmp_path / "c.duckdb") and copy.name == "wh"  # type: ignore[attr-defined]
    replica = PostgresSinkPlugin.config_model.model_validate(
        {"name": "r", "type": "postgres", "dsn": "postgresql://h/db"}
    )
    moved = copy_config(PostgresSinkPlugin, replica, ("schema=shop_v2",))
    assert moved.schema_ == "shop_v2"  # type: ignore[attr-defined]
    assert moved.dsn.get_secret_value() == "postgresql://h/db"  # type: ignore[attr-defined]
    with pytest.raises(CopyRefused, match="own store"):
        copy_config(PostgresSinkPlugin, replica, ("postgresql://h/db",))
    with pytest.raises(CopyRefused, match="cannot be rebuilt into a copy"):
        hook = HttpSinkPlugin.config_model.model_validate(
            {"name": "h", "type": "http", "url": "http://x/", "secret": "s" * 20}
        )
        copy_config(HttpSinkPlugin, hook, ("http://y/",))
    with pytest.raises(CopyRefused, match="--into: "):
        copy_config(DuckDBSinkPlugin, wh, ("path=",))


def test_catch_up_ends_on_an_empty_poll_only_past_the_last_record() -> None:
    clock = _Clock()
    with capture_logs() as logs:
        catch = CatchUp(get_logger(), {}, {A: 3001, B: 2001}, clock=clock)
        catch.idle()  # a consumer not assigned yet reads nothing: far from done
        assert not catch.done
        catch.note({A: 3000, B: 2000})  # a transaction marker ends each partition
        assert not catch.done
        catch.idle()
    assert catch.done and [e["event"] for e in logs][-1] == "sink.catch_up.finished"
