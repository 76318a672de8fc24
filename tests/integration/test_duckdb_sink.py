"""The DuckDB sink against a real DuckDB file (embedded, so every test runs it for real).

Records are built as the runner builds them: events encoded by :mod:`cdc.envelope.encode`, then
decoded with orjson (the harness is ``duckdb_kit.py``). Every type and bad values are in
``test_duckdb_sink_types.py``; schema evolution, history mode and crash safety are in
``test_duckdb_sink_more.py``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from cdc.contracts.errors import SinkFatal, SinkUnavailable
from cdc.contracts.events import Op
from cdc.contracts.sink import Sink, SinkContext
from cdc.support.logging import get_logger
from cdc.testing.conformance import SinkConformance
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig, DuckDBSinkPlugin, read_rows
from tests.integration.duckdb_kit import (
    PIPELINE,
    TOPIC,
    Harness,
    Schemas,
    event,
    item,
    names,
)


class TestDuckDBConformance(SinkConformance):
    @pytest.fixture(autouse=True)
    def _file(self, tmp_path: Path) -> None:
        self.path = tmp_path / "kit.duckdb"

    def make_sink(self, context: SinkContext) -> Sink:
        return DuckDBSink(DuckDBSinkConfig(name="kit", path=str(self.path)), context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        if not self.path.exists():
            return {}
        return {key["id"]: row for key, row in read_rows(self.path, "public", "kit_items")}


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "out" / "wh.duckdb")
    yield harness
    harness.sink.close()


# -- upsert, delete, truncate -------------------------------------------------------------------


def test_upsert_update_delete_and_tombstone(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    wh.apply(item(Op.UPDATE, 1, 12, "a2", 10), item(Op.DELETE, 2, 13))
    assert names(wh) == {1: ("a2", 10)}
    # the tombstone that follows a delete is in the batch and changes nothing
    assert [r.value for r in wh.records(item(Op.DELETE, 3, 14))][1] is None
    wh.apply(item(Op.CREATE, 2, 20, "b again", 3))
    assert names(wh) == {1: ("a2", 10), 2: ("b again", 3)}


def test_newest_change_per_key_wins_within_a_batch(wh: Harness) -> None:
    wh.apply(
        item(Op.CREATE, 1, 10, "v1", 1),
        item(Op.UPDATE, 1, 12, "v3", 3),
        item(Op.UPDATE, 1, 11, "v2", 2),  # older, from another partition in real life
        item(Op.CREATE, 2, 13, "x", 1),
        item(Op.DELETE, 2, 14),
    )
    assert names(wh) == {1: ("v3", 3)}


def test_truncate_deletes_older_rows_and_keeps_newer_ones(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    truncate = event(Op.TRUNCATE, {}, None, 20)
    wh.apply(truncate, item(Op.CREATE, 3, 21, "c", 3))
    assert names(wh) == {3: ("c", 3)}
    wh.apply(item(Op.UPDATE, 1, 15, "late", 9))  # older than the truncate: ignored
    assert names(wh) == {3: ("c", 3)}


def test_truncate_on_another_partition_is_ordered_by_position(wh: Harness) -> None:
    rows = wh.records(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 30, "b", 2), partition=1)
    truncate = wh.records(event(Op.TRUNCATE, {}, None, 20), partition=0)
    wh.write(rows + truncate)
    assert names(wh) == {2: ("b", 2)}


# -- replays and ordering -----------------------------------------------------------------------


def test_replay_of_a_batch_is_idempotent_even_without_offsets(wh: Harness) -> None:
    batch = wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.UPDATE, 1, 11, "a2", 2))
    wh.reopen()
    wh.write(batch)  # skipped by offset
    fresh = wh.records(item(Op.CREATE, 1, 10, "a", 1), item(Op.UPDATE, 1, 11, "a2", 2))
    wh.write(fresh)  # new offsets (a re-read topic): skipped by position
    assert names(wh) == {1: ("a2", 2)}
    assert wh.sql("SELECT count(*) FROM public.items") == [(1,)]


def test_older_change_after_newer_is_ignored_also_after_a_delete(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.apply(item(Op.UPDATE, 1, 30, "c", 3))
    wh.apply(item(Op.UPDATE, 1, 20, "b", 2))
    assert names(wh) == {1: ("c", 3)}
    wh.apply(item(Op.DELETE, 1, 40))
    wh.apply(item(Op.UPDATE, 1, 35, "zombie", 4))
    assert names(wh) == {}
    wh.apply(item(Op.CREATE, 1, 50, "reborn", 5))
    assert names(wh) == {1: ("reborn", 5)}


def test_offsets_are_stored_with_the_data(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.DELETE, 1, 11))
    assert wh.sink.stored_offsets() == {(TOPIC, 0): 3}
    wh.reopen()
    assert wh.sink.stored_offsets() == {(TOPIC, 0): 3}
    assert wh.sql("SELECT * FROM _cdc.offsets") == [(TOPIC, 0, 3)]


def test_schemaless_tables_keep_key_and_document(wh: Harness) -> None:
    key = {"_id": {"$oid": "65a1b2c3d4e5f60718293a4b"}}
    doc = {**key, "name": "x", "tags": ["a", "b"], "n": {"$numberDecimal": "1.5"}}
    wh.apply(event(Op.CREATE, key, doc, 10, schema="app", table="users"))
    wh.apply(event(Op.UPDATE, key, {**doc, "name": "y"}, 11, schema="app", table="users"))
    rows = list(read_rows(wh.path, "app", "users"))
    assert rows == [(key, {**doc, "name": "y"})]
    wh.apply(event(Op.DELETE, key, None, 12, schema="app", table="users"))
    assert list(read_rows(wh.path, "app", "users")) == []


# -- opening ------------------------------------------------------------------------------------


def _open(path: Path) -> None:
    context = SinkContext(PIPELINE, "wh", [], Schemas(), get_logger(sink="wh"))
    DuckDBSink(DuckDBSinkConfig(name="wh", path=str(path)), context).open()


def test_unusable_paths_are_fatal(tmp_path: Path) -> None:
    with pytest.raises(SinkFatal, match="is a directory"):
        _open(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(SinkFatal, match="cannot create"):
        _open(tmp_path / "file" / "wh.duckdb")
    (tmp_path / "junk.duckdb").write_bytes(b"not a database" * 1000)
    with pytest.raises(SinkFatal):
        _open(tmp_path / "junk.duckdb")


HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_a_file_locked_by_another_process_is_unavailable_and_still_readable(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.sink.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(wh.path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(SinkUnavailable, match="one writing process"):
            _open(wh.path)
        config = DuckDBSinkConfig(name="wh", path=str(wh.path))
        rows = list(DuckDBSinkPlugin.read_rows(config, "public", "items"))
        assert rows == [({"id": 1}, {"id": 1, "name": "a", "qty": 1})]
    finally:
        holder.kill()
        holder.wait()
    wh.sink = wh.new_sink()


def test_read_rows_in_the_writing_process(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    assert list(read_rows(wh.path, "public", "items")) == [
        ({"id": 1}, {"id": 1, "name": "a", "qty": 1})
    ]
    assert list(read_rows(wh.path, "public", "absent")) == []
    wh.apply(item(Op.CREATE, 2, 11, "b", 2))  # the writer is unharmed by the reader
    assert len(wh.rows()) == 2


def test_plugin_is_registered() -> None:
    from cdc.contracts import plugins

    assert plugins.load(plugins.SINK_GROUP, "duckdb") is DuckDBSinkPlugin
    assert duckdb.__version__


def test_read_rows_of_a_foreign_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    duckdb.connect(str(path)).close()
    with pytest.raises(SinkFatal, match="not written by this sink"):
        list(read_rows(path, "public", "items"))
    with pytest.raises(SinkFatal, match="no database file"):
        list(read_rows(tmp_path / "missing.duckdb", "public", "items"))
