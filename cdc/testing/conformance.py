"""The sink conformance kit: the behaviour every sink must show, run against the real store.

A sink author subclasses :class:`SinkConformance` in a test module (the class name must start
with ``Test`` so pytest collects it) and implements two methods::

    class TestMySink(SinkConformance):
        @pytest.fixture(autouse=True)
        def _store(self, tmp_path, my_server):   # whatever the sink needs
            self.url = my_server.url

        def make_sink(self, context):            # a NEW sink over the SAME store each call
            return MySink(MySinkConfig(name="kit", type="mine", url=self.url), context)

        def current_rows(self):                  # what the store holds now, by id
            return {row_id: {"name": ..., "qty": ..., "note": ...}, ...}

and optionally :meth:`SinkConformance.outage`, a context manager that makes the real store
unreachable (stop the server); the default simulates one in front of the sink.

An append-only sink (one line per record, as the jsonl sink) sets ``guards_positions = False``:
it keeps every change in the order delivered instead of the newest by source position, so the
two checks of a late, older change do not apply to it. Its ``current_rows`` is then the state
a reader gets by applying its records in order.

Every check uses table ``public.kit_items`` (``id bigint`` key, ``name text``, ``qty integer``,
later ``note text``; the delete check gives it NOT NULL columns of many types, :data:`TYPED`)
of pipeline ``kit``. Records are built the way the runtime builds them:
events encoded by :mod:`cdc.envelope.encode`, then decoded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
import structlog.testing

from cdc.contracts.errors import SinkFatal, SinkUnavailable
from cdc.contracts.events import ChangeEvent, Op, SourceInfo, topic_name
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import Sink, SinkContext, SinkRecord
from cdc.envelope import encode as envelope
from cdc.log.base import Log, TopicPartition
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.support.logging import get_logger
from cdc.support.wait import wait_until

PIPELINE = "kit"
TABLE = ("public", "kit_items")
TOPIC = topic_name(PIPELINE, *TABLE)
V1 = TableSchema(
    "kit",
    *TABLE,
    columns=(
        Column("id", "bigint", key=True, nullable=False),
        Column("name", "text"),
        Column("qty", "integer"),
    ),
)
V2 = TableSchema("kit", *TABLE, columns=(*V1.columns, Column("note", "text")), position=50)

# NOT NULL columns of the types whose placeholders a store would refuse (numeric, temporal,
# uuid, interval, json): name, source type, a real value (readable envelope), the placeholder
# Debezium puts in a key-only delete's ``before`` for it.
TYPED_COLUMNS: tuple[tuple[str, str, Any, Any], ...] = (
    ("amount", "numeric(10,2)", "12.50", ""),
    ("day", "date", "2024-02-29", ""),
    ("at", "time without time zone", "13:14:15.123456", ""),
    ("ts", "timestamp without time zone", "2024-01-02T03:04:05.678901", ""),
    ("tstz", "timestamp with time zone", "2024-01-02T03:04:05.5Z", ""),
    ("ttz", "time with time zone", "13:14:15+02:00", ""),
    ("uid", "uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", ""),
    ("span", "interval", "P1DT2H", ""),
    ("doc", "json", '{"a": [1, 2]}', ""),
    ("docb", "jsonb", '{"b": {"c": null}}', ""),
    ("flag", "boolean", True, False),
    ("big", "bigint", 7, 0),
    ("tags", "text[]", ["x", "y"], []),
)
TYPED = TableSchema(
    "kit",
    *TABLE,
    columns=(
        *V1.columns,
        *(Column(name, kind, nullable=False) for name, kind, _, _ in TYPED_COLUMNS),
    ),
    position=70,
)


class StaticSchemas:
    """A schema lookup the kit controls."""

    def __init__(self) -> None:
        self.current: dict[tuple[str, str], TableSchema] = {TABLE: V1}

    def get(self, schema: str, table: str) -> TableSchema | None:
        return self.current.get((schema, table))


def change(
    key: int,
    op: Op,
    pos: int,
    name: str = "",
    qty: int = 0,
    note: str | None = None,
    with_note: bool = False,
) -> ChangeEvent:
    """An event of the kit table at source position ``pos``."""
    row: dict[str, Any] = {"id": key, "name": name, "qty": qty}
    if with_note:
        row["note"] = note
    source = SourceInfo("kit", "kit", TABLE[0], TABLE[1], 0, pos, 0)
    if op is Op.DELETE:
        return ChangeEvent(op, {"id": key}, {"id": key}, None, source)
    return ChangeEvent(op, {"id": key}, None, row, source)


def typed_change(key: int, op: Op, pos: int, name: str = "", qty: int = 0) -> ChangeEvent:
    """A change of the kit table under :data:`TYPED`; a delete's ``before`` is what PostgreSQL
    gives under REPLICA IDENTITY DEFAULT, as Debezium writes it: the key, and a placeholder
    (``""``, ``0``, ``false``, ``[]``) for every other NOT NULL column."""
    source = SourceInfo("kit", "kit", TABLE[0], TABLE[1], 0, pos, 0)
    if op is Op.DELETE:
        placeholders = {n: empty for n, _, _, empty in TYPED_COLUMNS}
        before = {"id": key, "name": None, "qty": None, **placeholders}
        return ChangeEvent(op, {"id": key}, before, None, source)
    row = {"id": key, "name": name, "qty": qty, **{n: v for n, _, v, _ in TYPED_COLUMNS}}
    return ChangeEvent(op, {"id": key}, None, row, source)


class _Offsets:
    def __init__(self) -> None:
        self.next = 0

    def take(self) -> int:
        self.next += 1
        return self.next - 1


class _Unavailable:
    """Wraps a sink; while ``down`` is set every call raises ``SinkUnavailable``."""

    def __init__(self, inner: Sink, down: threading.Event) -> None:
        self._inner = inner
        self._down = down

    def _check(self) -> None:
        if self._down.is_set():
            raise SinkUnavailable("kit outage")

    def open(self) -> None:
        self._check()
        self._inner.open()

    def stored_offsets(self) -> Mapping[TopicPartition, int] | None:
        return self._inner.stored_offsets()

    def write(self, records: Sequence[SinkRecord]) -> None:
        self._check()
        self._inner.write(records)

    def flush(self) -> None:
        self._check()
        self._inner.flush()

    def close(self) -> None:
        self._inner.close()

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        self._check()
        self._inner.reset_table(table, partitions)


class _FailingFlush(_Unavailable):
    def flush(self) -> None:
        raise SinkFatal("kit: flush fails")


class SinkConformance:
    """Checks every sink passes; see the module docstring for how to use it."""

    # The sink keeps, per key, the change with the highest source position: a change older than
    # the one it holds, arriving later (a replay), is ignored. False for append-only sinks.
    guards_positions: ClassVar[bool] = True

    # -- to implement ------------------------------------------------------------------------

    def make_sink(self, context: SinkContext) -> Sink:
        raise NotImplementedError

    def current_rows(self) -> dict[int, dict[str, Any]]:
        raise NotImplementedError

    @contextmanager
    def outage(self) -> Iterator[None]:
        """Make the store unreachable for the duration; the default simulates it."""
        self._simulated_down.set()
        try:
            yield
        finally:
            self._simulated_down.clear()

    # -- plumbing ----------------------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _kit(self, tmp_path: Path) -> None:
        self.setup_kit(tmp_path)

    def setup_kit(self, tmp_path: Path) -> None:
        """Fresh kit state; the autouse fixture calls it before each check."""
        self.kit_dir = tmp_path
        self.schemas = StaticSchemas()
        self.offsets = _Offsets()
        self._simulated_down = threading.Event()

    def context(self) -> SinkContext:
        return SinkContext(PIPELINE, "kit", [TABLE], self.schemas, get_logger(sink="kit"))

    def records(self, *events: ChangeEvent) -> list[SinkRecord]:
        """Records as the runner hands them over, with fresh offsets (partition 0)."""
        out = []
        for event in events:
            for record in envelope.to_records(event, PIPELINE, now_ms=0):
                value = None if record.value is None else orjson.loads(record.value)
                key = orjson.loads(record.key or b"null")
                out.append(SinkRecord(TOPIC, 0, self.offsets.take(), key, value, pos=record.pos))
        return out

    def apply(self, records: list[SinkRecord], sink: Sink | None = None) -> None:
        """Open a sink (unless given), write and flush ``records``, and close it."""
        own = sink is None
        sink = sink or self.make_sink(self.context())
        if own:
            sink.open()
        sink.write(records)
        sink.flush()
        if own:
            sink.close()

    def rows(self) -> dict[int, tuple[Any, ...]]:
        return {k: (v.get("name"), v.get("qty")) for k, v in self.current_rows().items()}

    def log(self) -> Log:
        from cdc.log.embedded import EmbeddedLog

        return EmbeddedLog(self.kit_dir / "kit-log")

    def fill_log(self, log: Log, events: Sequence[ChangeEvent]) -> None:
        log.ensure_topics([TOPIC])
        tx = log.begin()
        tx.append([r for e in events for r in envelope.to_records(e, PIPELINE, now_ms=0)])
        tx.commit()

    def task(self, log: Log, stop: threading.Event, sink_factory: Any = None) -> SinkTask:
        factory = sink_factory or (
            lambda: _Unavailable(self.make_sink(self.context()), self._simulated_down)
        )
        return SinkTask(
            PIPELINE,
            "kit",
            log,
            factory,
            [TOPIC],
            stop,
            get_logger(sink="kit"),
            max_records=7,
            poll_timeout_s=0.05,
        )

    # -- the checks --------------------------------------------------------------------------

    def test_kit_replay_of_a_batch_is_idempotent(self) -> None:
        batch = self.records(*(change(k, Op.CREATE, 10 + k, f"n{k}", k) for k in range(1, 6)))
        self.apply(batch)
        self.apply(batch)  # a restart replays what was not committed
        assert self.rows() == {k: (f"n{k}", k) for k in range(1, 6)}

    def test_kit_older_change_after_newer_is_ignored(self) -> None:
        if not self.guards_positions:
            pytest.skip("append-only sink: it keeps every change in delivery order")
        self.apply(self.records(change(1, Op.CREATE, 10, "v1", 1)))
        self.apply(self.records(change(1, Op.UPDATE, 30, "v3", 3)))
        self.apply(self.records(change(1, Op.UPDATE, 20, "v2", 2)))  # a late replay
        assert self.rows() == {1: ("v3", 3)}

    def test_kit_deletes_and_tombstones(self) -> None:
        self.apply(self.records(change(1, Op.CREATE, 10, "a", 1), change(2, Op.CREATE, 11, "b", 2)))
        self.apply(self.records(change(1, Op.DELETE, 12)))
        assert self.rows() == {2: ("b", 2)}
        stray = SinkRecord(TOPIC, 0, self.offsets.take(), {"id": 3}, None)
        self.apply([stray])  # a tombstone alone changes nothing
        assert self.rows() == {2: ("b", 2)}
        if self.guards_positions:
            self.apply(self.records(change(1, Op.CREATE, 10, "a", 1)))  # older than the delete
            assert self.rows() == {2: ("b", 2)}

    def test_kit_a_tombstone_without_its_delete_deletes_the_key(self) -> None:
        # Compaction keeps a key's latest record, and may run while a sink is behind: the sink
        # then reads a delete's tombstone without the delete. The tombstone carries the
        # delete's position, and is that delete.
        self.apply(self.records(change(1, Op.CREATE, 10, "a", 1), change(2, Op.CREATE, 11, "b", 2)))
        delete, tombstone = self.records(change(1, Op.DELETE, 12))
        assert tombstone.value is None and tombstone.pos == delete.pos
        self.apply([tombstone])
        assert self.rows() == {2: ("b", 2)}
        self.apply([delete, tombstone])  # a replay of the delete and its tombstone
        assert self.rows() == {2: ("b", 2)}
        if self.guards_positions:
            self.apply(self.records(change(1, Op.CREATE, 10, "a", 1)))  # older than the delete
            assert self.rows() == {2: ("b", 2)}
            _, older = self.records(change(2, Op.DELETE, 13))
            self.apply(self.records(change(2, Op.UPDATE, 14, "b2", 3)))
            self.apply([older])  # a replayed tombstone, older than the row it meets
            assert self.rows() == {2: ("b2", 3)}

    def test_kit_delete_is_applied_by_its_key_never_by_its_placeholders(self) -> None:
        # A delete's before under REPLICA IDENTITY DEFAULT holds placeholders no column of
        # these types can take; the delete shares its batch with inserts and updates of the
        # same table, and one deletes a row inserted in that batch.
        self.schemas.current[TABLE] = TYPED
        self.apply(
            self.records(*(typed_change(k, Op.CREATE, 10 + k, f"n{k}", k) for k in (1, 2, 3)))
        )
        self.apply(
            self.records(
                typed_change(4, Op.CREATE, 20, "n4", 4),
                typed_change(1, Op.DELETE, 21),
                typed_change(2, Op.UPDATE, 22, "m2", 20),
                typed_change(5, Op.CREATE, 23, "n5", 5),
                typed_change(5, Op.DELETE, 24),
                typed_change(3, Op.DELETE, 25),
            )
        )
        assert self.rows() == {2: ("m2", 20), 4: ("n4", 4)}
        self.apply(self.records(typed_change(2, Op.DELETE, 30)))  # a batch of one delete
        assert self.rows() == {4: ("n4", 4)}

    def test_kit_added_column(self) -> None:
        self.apply(self.records(change(1, Op.CREATE, 10, "a", 1)))
        self.schemas.current[TABLE] = V2
        self.apply(self.records(change(2, Op.CREATE, 60, "b", 2, note="hello", with_note=True)))
        rows = self.current_rows()
        assert rows[2].get("note") == "hello"
        assert rows[1].get("note") is None
        assert self.rows() == {1: ("a", 1), 2: ("b", 2)}

    def test_kit_failing_flush_means_no_offset_commit(self) -> None:
        log = self.log()
        events = [change(k, Op.CREATE, 10 + k, f"n{k}", k) for k in range(1, 4)]
        self.fill_log(log, events)
        failing = self.task(
            log,
            threading.Event(),
            lambda: _FailingFlush(self.make_sink(self.context()), threading.Event()),
        )
        with pytest.raises(SinkFatal):
            failing.run()
        assert log.committed_offsets(group_name(PIPELINE, "kit")) == {}
        fresh = self.make_sink(self.context())
        fresh.open()
        assert not fresh.stored_offsets()
        fresh.close()
        self._run_until_caught_up(log, end=3)
        assert self.rows() == {k: (f"n{k}", k) for k in range(1, 4)}
        log.close()

    def test_kit_down_sink_applies_backpressure_and_loses_nothing(self) -> None:
        log = self.log()
        self.fill_log(log, [change(k, Op.CREATE, k, f"n{k}", k) for k in range(1, 11)])
        stop = threading.Event()
        task = self.task(log, stop)
        thread = threading.Thread(target=task.run, daemon=True)
        thread.start()
        self._wait_committed(log, 10)
        with self.outage(), structlog.testing.capture_logs() as logs:
            self.fill_log(log, [change(k, Op.UPDATE, 100 + k, f"m{k}", k) for k in range(1, 11)])
            wait_until(lambda: _retries(logs) >= 2, 60, describe="two refused writes")
            assert self._committed(log) == 10  # nothing more was taken while down
        self._wait_committed(log, 20)
        stop.set()
        thread.join(10)
        assert self.rows() == {k: (f"m{k}", k) for k in range(1, 11)}
        log.close()

    def test_kit_reset_table_forgets_it_and_rebuilds_it_from_the_log(self) -> None:
        log = self.log()
        self.fill_log(log, [change(k, Op.CREATE, 10 + k, f"n{k}", k) for k in range(1, 6)])
        self.fill_log(log, [change(2, Op.DELETE, 20), change(3, Op.UPDATE, 21, "m3", 30)])
        self._run_until_caught_up(log, end=8)  # 5 creates, a delete, its tombstone, an update
        partitions = [TopicPartition(TOPIC, p) for p in log.end_offsets(TOPIC)]
        sink = self.make_sink(self.context())
        sink.open()
        sink.reset_table(TABLE, partitions)
        assert self.current_rows() == {}
        assert {tp: o for tp, o in (sink.stored_offsets() or {}).items() if tp.topic == TOPIC} == {
            tp: 0 for tp in partitions
        }
        sink.reset_table(TABLE, partitions)  # idempotent: a reset cut short is done again
        sink.close()
        reopened = self.make_sink(self.context())
        reopened.open()  # the reset is durable
        assert all(reopened.stored_offsets()[tp] == 0 for tp in partitions)  # type: ignore[index]
        reopened.close()
        # The group's committed offsets are the old ones until the rebuild commits: wait until
        # the task has applied the 8 records again (reading rows meanwhile could hold the store).
        stop = threading.Event()
        task = self.task(log, stop)
        thread = threading.Thread(target=task.run, daemon=True)
        thread.start()
        wait_until(
            lambda: task.records_applied >= 8 or not thread.is_alive(),
            60,
            describe=lambda: f"8 records rebuilt ({task.records_applied})",
        )
        stop.set()
        thread.join(10)
        assert self.rows() == {1: ("n1", 1), 3: ("m3", 30), 4: ("n4", 4), 5: ("n5", 5)}
        log.close()

    def _committed(self, log: Log) -> int:
        return sum(log.committed_offsets(group_name(PIPELINE, "kit")).values())

    def _wait_committed(self, log: Log, count: int, timeout_s: float = 60) -> None:
        wait_until(
            lambda: self._committed(log) >= count,
            timeout_s,
            describe=lambda: f"{count} commits ({self._committed(log)})",
        )

    def _run_until_caught_up(self, log: Log, end: int) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=self.task(log, stop).run, daemon=True)
        thread.start()
        self._wait_committed(log, end)
        stop.set()
        thread.join(10)


def _retries(logs: Sequence[Mapping[str, Any]]) -> int:
    """How many writes the sink task was refused and tries again (``sink.retrying``)."""
    return sum(1 for entry in logs if entry.get("event") == "sink.retrying")
