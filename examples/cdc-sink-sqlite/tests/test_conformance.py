"""The shipped conformance kit, run against a real SQLite file: what every sink must show
(replays, late changes, deletes by key, added columns, failed flushes, outages, table resets);
then what is this sink's own: truncates, and a record it cannot apply."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cdc.contracts.errors import RecordError
from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.testing.conformance import TABLE, TOPIC, SinkConformance, change

from cdc_sink_sqlite import SqliteSink, SqliteSinkConfig
from cdc_sink_sqlite.reader import read_rows


class TestSqliteSink(SinkConformance):
    @pytest.fixture(autouse=True)
    def _database(self, tmp_path: Path) -> None:
        self.path = tmp_path / "sink.db"

    def make_sink(self, context: SinkContext) -> SqliteSink:
        # A short lock wait: the outage below holds the write lock, and each refused batch
        # should come back to the runner soon.
        config = SqliteSinkConfig(
            name="kit", type="sqlite", path=str(self.path), busy_timeout_s=0.2
        )
        return SqliteSink(config, context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        if not self.path.exists():
            return {}
        return {key["id"]: row for key, row in read_rows(self.path, *TABLE)}

    @contextmanager
    def outage(self) -> Iterator[None]:
        """A real one: another connection holds the database's write lock, so every flush is
        refused (SQLITE_BUSY) until it lets go."""
        con = sqlite3.connect(self.path, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            con.execute("ROLLBACK")
            con.close()

    # -- beyond the kit -----------------------------------------------------------------

    def test_a_truncate_empties_the_table_older_than_it(self) -> None:
        truncate = ChangeEvent(Op.TRUNCATE, {}, None, None, SourceInfo("kit", "kit", *TABLE, 0, 20))
        self.apply(self.records(change(1, Op.CREATE, 10, "a", 1), change(2, Op.CREATE, 30, "b", 2)))
        self.apply(self.records(truncate))  # key 2 changed after the truncate: it stays
        assert self.rows() == {2: ("b", 2)}
        self.apply(self.records(change(3, Op.CREATE, 15, "c", 3)))  # older than the truncate
        self.apply(self.records(truncate))  # replayed
        assert self.rows() == {2: ("b", 2)}
        self.apply(self.records(change(3, Op.CREATE, 40, "c", 3)))
        assert self.rows() == {2: ("b", 2), 3: ("c", 3)}

    def test_a_record_without_a_position_fails_its_batch_whole(self) -> None:
        good = self.records(change(1, Op.CREATE, 10, "a", 1))
        value = dict(good[0].value or {}, source={})  # no position in the value either
        bad = SinkRecord(TOPIC, 0, self.offsets.take(), {"id": 2}, value)
        sink = self.make_sink(self.context())
        sink.open()
        sink.write([*good, bad])
        with pytest.raises(RecordError) as raised:
            sink.flush()
        assert raised.value.record is bad
        assert self.current_rows() == {} and not sink.stored_offsets()
        sink.write(good)  # the runner's retry without the record it dead-lettered
        sink.flush()
        assert self.rows() == {1: ("a", 1)}
        sink.close()
