"""The view task's local store (cdc/views/store.py) on a real embedded log: its Python memory
does not grow with the tables it joins, and a store deleted or left behind the state topic is
rebuilt at a start, the view still equal to the source's join."""

from __future__ import annotations

import shutil
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.config.pipeline import Pipeline, parse
from cdc.contracts.errors import LogUnavailable
from cdc.contracts.schema import Column, TableSchema, schema_record
from cdc.envelope.encode import write_pos
from cdc.log.base import Record
from cdc.log.embedded.log import EmbeddedLog
from cdc.support.logging import get_logger
from cdc.support.wait import wait_until
from cdc.views.join import canonical_key
from cdc.views.store import ViewStore, join_rows
from cdc.views.task import ViewTask

FILE = """
version: 1
name: shop
source: {type: generator, tables: [public.customers, public.orders, public.order_items]}
log: {type: embedded, path: 'LOG'}
views:
  - name: order_docs
    root: public.orders
    embed:
      - {field: customer, from: public.customers, on: {customer_id: id}}
      - {field: items, from: public.order_items, on: {id: order_id}, many: true}
"""
COLUMNS = {
    "customers": ("id", "name"),
    "orders": ("id", "customer_id", "note"),
    "order_items": ("id", "order_id", "sku"),
}
TABLES = {f"public.{t}": t for t in COLUMNS}
VIEW_TOPIC = "shop.views.order_docs"


class Source:
    """The rows written to the log's table topics, kept to join them for the expected view."""

    def __init__(self, log: EmbeddedLog) -> None:
        self.log = log
        self.rows: dict[str, dict[int, dict[str, Any]]] = {t: {} for t in TABLES}
        self.pos = 0

    def write(self, table: str, rows: list[dict[str, Any]]) -> None:
        records = []
        for row in rows:
            self.pos += 1
            value = {"before": None, "after": row, "op": "c"}
            key = orjson.dumps({"id": row["id"]})
            topic = f"shop.{table}"
            records.append(Record(topic, key, orjson.dumps(value), write_pos(self.pos, 0)))
            self.rows[table][row["id"]] = row
        with self.log.begin() as tx:
            tx.append(records)

    def join(self, pipeline: Pipeline) -> dict[bytes, Any]:
        tables = {t: [({"id": i}, r) for i, r in rows.items()] for t, rows in self.rows.items()}
        return join_rows(pipeline.views[0], tables)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EmbeddedLog]:
    with EmbeddedLog(tmp_path / "log") as opened:
        with opened.begin() as tx:
            tx.append([schema_record("shop", _schema(t, c)) for t, c in COLUMNS.items()])
        yield opened


def _schema(table: str, columns: tuple[str, ...]) -> TableSchema:
    cols = tuple(
        Column(c, "integer" if c.endswith("id") else "text", key=c == "id") for c in columns
    )
    return TableSchema("test", "public", table, cols)


def _pipeline(log: EmbeddedLog) -> Pipeline:
    # The store's default place: views/ in the pipeline's local state, here the log's directory.
    return parse(FILE.replace("LOG", str(log.path)), {})


def documents(log: EmbeddedLog) -> dict[bytes, Any]:
    docs: dict[bytes, Any] = {}
    end = log.end_offsets(VIEW_TOPIC).get(0, 0) if _exists(log, VIEW_TOPIC) else 0
    offset = 0
    while offset < end:
        chunk = log.read(VIEW_TOPIC, 0, offset, 5000)
        for record in chunk:
            after = None if record.value is None else orjson.loads(record.value)["after"]
            key = canonical_key(orjson.loads(record.key))
            if after is None:
                docs.pop(key, None)
            else:
                after.pop("_positions")
                docs[key] = after
        offset = chunk[-1].offset + 1
    return docs


def _exists(log: EmbeddedLog, topic: str) -> bool:
    return topic in {t.name for t in log.topics()}


def caught_up(log: EmbeddedLog) -> bool:
    committed = log.committed_offsets("shop.view.order_docs")
    for table in TABLES:
        for partition, end in log.end_offsets(f"shop.{table}").items():
            if end and committed.get(_tp(f"shop.{table}", partition), 0) < end:
                return False
    return True


def _tp(topic: str, partition: int) -> Any:
    from cdc.log.base import TopicPartition

    return TopicPartition(topic, partition)


def run_until(log: EmbeddedLog, done: Any) -> ViewTask:
    """Serve the view until ``done()`` holds; the task, stopped."""
    pipeline = _pipeline(log)
    stop = threading.Event()
    task = ViewTask(pipeline, pipeline.views[0], 0, log, stop, get_logger(), poll_timeout_s=0.05)
    thread = threading.Thread(target=task.serve, daemon=True)
    thread.start()
    try:
        wait_until(done, 60, 0.05, describe="the view caught up")
    finally:
        stop.set()
        thread.join(30)
    return task


def _load(source: Source, orders: int) -> None:
    source.write("public.customers", [{"id": c, "name": f"c{c}"} for c in range(1, 101)])
    for start in range(1, orders + 1, 2000):
        ids = range(start, min(orders + 1, start + 2000))
        source.write(
            "public.orders", [{"id": o, "customer_id": 1 + o % 100, "note": "x" * 40} for o in ids]
        )
        source.write("public.order_items", [{"id": o, "order_id": o, "sku": "s" * 20} for o in ids])


def _peak(tmp_path: Path, orders: int) -> int:
    with EmbeddedLog(tmp_path / f"log{orders}") as log:
        with log.begin() as tx:
            tx.append([schema_record("shop", _schema(t, c)) for t, c in COLUMNS.items()])
        _load(Source(log), orders)
        tracemalloc.start()
        try:
            run_until(log, lambda: caught_up(log))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(documents(log)) == orders
        return peak


def test_the_view_tasks_memory_does_not_grow_with_its_tables(tmp_path: Path) -> None:
    small, large = _peak(tmp_path, 2_000), _peak(tmp_path, 20_000)
    print(f"tracemalloc peak: {small / 1e6:.1f} MB at 2k orders, {large / 1e6:.1f} MB at 20k")
    # Ten times the rows: the rows held in Python dicts took about 10x the memory; in the store
    # the peak is a batch's records and documents, whatever the tables' size.
    assert large < small * 1.5 + 1_000_000, (small, large)
    assert large < 24_000_000, (small, large)


def test_a_store_behind_the_state_topic_or_deleted_is_rebuilt_at_a_start(log: EmbeddedLog) -> None:
    source = Source(log)
    source.write("public.customers", [{"id": 1, "name": "A"}])
    source.write("public.orders", [{"id": n, "customer_id": 1, "note": ""} for n in (1, 2, 3)])
    assert run_until(log, lambda: caught_up(log)).rebuilds == 1  # no store yet: built empty
    store = log.path / "views" / "order_docs.sqlite"
    stale = log.path / "stale.sqlite"
    shutil.copy(store, stale)  # closed with the task: its WAL is checkpointed into it
    source.write("public.orders", [{"id": 4, "customer_id": 1, "note": ""}])
    assert run_until(log, lambda: caught_up(log)).rebuilds == 0  # it matched the topic
    # A store as a crash between the log's commit and its own leaves it: behind the topic.
    # Kept, it would not know order 4 is the customer's, and the rename would miss its document.
    shutil.copy(stale, store)
    source.write("public.customers", [{"id": 1, "name": "B"}])
    task = run_until(log, lambda: caught_up(log))
    assert task.rebuilds == 1
    pipeline = _pipeline(log)
    assert documents(log) == source.join(pipeline)
    assert all(d["customer"]["name"] == "B" for d in documents(log).values())
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store}{suffix}").unlink(missing_ok=True)
    source.write("public.order_items", [{"id": 7, "order_id": 4, "sku": "k"}])
    source.write("public.customers", [{"id": 1, "name": "C"}])
    assert run_until(log, lambda: caught_up(log)).rebuilds == 1
    assert documents(log) == source.join(pipeline)
    assert documents(log)[canonical_key({"id": 4})]["items"] == [
        {"id": 7, "order_id": 4, "sku": "k"}
    ]


def test_a_failure_between_the_logs_commit_and_the_stores_is_repaired_by_a_rebuild(
    log: EmbeddedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = Source(log)
    source.write("public.customers", [{"id": 1, "name": "A"}])
    source.write("public.orders", [{"id": 1, "customer_id": 1, "note": ""}])
    original = ViewStore.commit
    failed: list[int] = []

    def once(self: ViewStore, token: str | None, high: Any, seq: int) -> None:
        # Fault injection: the log transaction committed, the store's commit fails (as a crash
        # there would leave it); the session is retried.
        if high is not None and not failed:
            failed.append(1)
            self.rollback()
            raise LogUnavailable("injected")
        original(self, token, high, seq)

    monkeypatch.setattr(ViewStore, "commit", once)
    pipeline = _pipeline(log)
    stop = threading.Event()
    task = ViewTask(pipeline, pipeline.views[0], 0, log, stop, get_logger(), poll_timeout_s=0.05)
    thread = threading.Thread(target=task.serve, daemon=True)
    thread.start()
    try:
        wait_until(lambda: failed and caught_up(log), 30, 0.05)
        assert log.end_offsets(VIEW_TOPIC) == {0: 1}  # the committed batch is not written again
        # The rebuilt store knows order 2 is customer 1's, so the rename rewrites both.
        source.write("public.orders", [{"id": 2, "customer_id": 1, "note": ""}])
        source.write("public.customers", [{"id": 1, "name": "B"}])
        wait_until(lambda: caught_up(log), 30, 0.05)
    finally:
        stop.set()
        thread.join(30)
    assert documents(log) == source.join(pipeline)
    assert [d["customer"]["name"] for d in documents(log).values()] == ["B", "B"]
    assert task.rebuilds == 2  # at the first start, and after the failure


def test_a_rebuild_stops_when_its_term_ends(log: EmbeddedLog) -> None:
    """A rebuild reads the whole state topic; a term that ends meanwhile (on Kafka the lease
    lost, whose revocation waits for the term) stops it between reads, the store left to be
    rebuilt by the next term, rather than reading on to the end."""
    source = Source(log)
    source.write("public.customers", [{"id": 1, "name": "A"}])
    source.write("public.orders", [{"id": n, "customer_id": 1, "note": ""} for n in range(1, 30)])
    run_until(log, lambda: caught_up(log))
    store = log.path / "views" / "order_docs.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store}{suffix}").unlink(missing_ok=True)
    pipeline = _pipeline(log)
    ended = threading.Event()
    task = ViewTask(pipeline, pipeline.views[0], 0, log, ended, get_logger())
    reads = []
    read = log.read

    def read_then_end(*args: Any) -> Any:
        reads.append(args)
        ended.set()  # the term ends while the rebuild reads
        return read(*args)

    log.read = read_then_end  # type: ignore[method-assign]
    try:
        task.serve()  # returns: the term ended
    finally:
        log.read = read  # type: ignore[method-assign]
    # One read (the state topic's last token), then the rebuild saw the term ended.
    assert len(reads) == 1 and task.rebuilds == 0
    # The next term rebuilds it whole, and applies a rename over every order.
    source.write("public.customers", [{"id": 1, "name": "B"}])
    assert run_until(log, lambda: caught_up(log)).rebuilds == 1
    assert documents(log) == source.join(pipeline)
