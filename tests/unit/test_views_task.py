"""The view task on a real embedded log (SQLite, in process): documents, state and the
group's offsets commit in one transaction, and a new task resumes from the stored state."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.config.pipeline import Pipeline, parse
from cdc.contracts.errors import LogFatal, LogUnavailable
from cdc.contracts.schema import Column, TableSchema, schema_record
from cdc.envelope.encode import write_pos
from cdc.log.base import Record
from cdc.log.embedded.log import EmbeddedLog
from cdc.log.embedded.txn import EmbeddedTransaction
from cdc.runtime.schemas import SchemaCatalog
from cdc.support.logging import get_logger
from cdc.support.wait import wait_until
from cdc.views.task import ViewMisconfigured, ViewTask

FILE = """
version: 1
name: shop
source: {type: generator, tables: [public.customers, public.orders, public.order_items]}
views:
  - name: order_docs
    root: public.orders
    embed:
      - {field: customer, from: public.customers, on: {customer_id: id}}
      - {field: items, from: public.order_items, on: {id: order_id}, many: true}
"""
COLUMNS = {
    "customers": ("id", "name"),
    "orders": ("id", "customer_id"),
    "order_items": ("id", "order_id"),
}


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EmbeddedLog]:
    with EmbeddedLog(tmp_path / "log") as opened:
        with opened.begin() as tx:
            tx.append([schema_record("shop", _schema(t, c)) for t, c in COLUMNS.items()])
        yield opened


def _schema(table: str, columns: tuple[str, ...]) -> TableSchema:
    cols = tuple(Column(c, "integer" if c != "name" else "text", key=c == "id") for c in columns)
    return TableSchema("test", "public", table, cols)


def change(table: str, row: dict[str, Any], pos: int) -> Record:
    value = {"before": None, "after": row, "op": "c"}
    key = orjson.dumps({"id": row["id"]})
    return Record(f"shop.public.{table}", key, orjson.dumps(value), write_pos(pos, 0))


def documents(log: EmbeddedLog) -> dict[int, Any]:
    topic = "shop.views.order_docs"
    if topic not in {t.name for t in log.topics()}:
        return {}
    docs = {}
    for record in log.read(topic, 0, 0, 10_000):
        docs[orjson.loads(record.key)["id"]] = orjson.loads(record.value or b"null")["after"]
    return docs


def serve(
    pipeline: Pipeline, log: EmbeddedLog, errors: list[BaseException] | None = None
) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    task = ViewTask(
        pipeline,
        pipeline.views[0],
        0,
        log,
        stop,
        get_logger(),
        poll_timeout_s=0.05,
        store_dir=log.path / "views",
    )

    def body() -> None:
        try:
            task.serve()
        except LogFatal as exc:
            (errors if errors is not None else []).append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return stop, thread


def test_a_failed_commit_leaves_nothing_and_the_retry_writes_each_document_once(
    log: EmbeddedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = parse(FILE, {})
    with log.begin() as tx:
        tx.append([change("customers", {"id": 1, "name": "A"}, 10)])
        tx.append([change("orders", {"id": n, "customer_id": 1}, 10 + n) for n in (1, 2)])
    failed = threading.Event()

    def refuse(self: EmbeddedTransaction, group: str, offsets: Any, consumer: Any) -> None:
        # Fault injection: the commit fails after the documents and state were appended.
        failed.set()
        raise LogFatal("injected")

    monkeypatch.setattr(EmbeddedTransaction, "store_group_offsets", refuse)
    errors: list[BaseException] = []
    stop, thread = serve(pipeline, log, errors)
    thread.join(10)
    assert failed.is_set() and not thread.is_alive() and errors  # fatal: the task ended
    assert documents(log) == {}
    assert log.committed_offsets("shop.view.order_docs") == {}
    assert log.end_offsets("shop.__views.order_docs.state") == {0: 0}
    monkeypatch.undo()
    stop, thread = serve(pipeline, log)
    try:
        wait_until(lambda: len(documents(log)) == 2, 10)
    finally:
        stop.set()
        thread.join(10)
    assert log.end_offsets("shop.views.order_docs") == {0: 2}  # once each
    assert documents(log)[2]["customer"] == {"id": 1, "name": "A"}


def test_a_new_task_resumes_from_the_stored_state_and_indexes(log: EmbeddedLog) -> None:
    pipeline = parse(FILE, {})
    with log.begin() as tx:
        tx.append([change("customers", {"id": 1, "name": "A"}, 10)])
        tx.append([change("orders", {"id": n, "customer_id": 1}, 10 + n) for n in (1, 2, 3)])
        tx.append([change("order_items", {"id": 9, "order_id": 3}, 20)])
    stop, thread = serve(pipeline, log)
    wait_until(lambda: len(documents(log)) == 3, 10)
    stop.set()
    thread.join(10)
    with log.begin() as tx:  # read by the next task only: the state must say who is affected
        tx.append([change("customers", {"id": 1, "name": "B"}, 30)])
    stop, thread = serve(pipeline, log)
    try:
        wait_until(lambda: all(d["customer"]["name"] == "B" for d in documents(log).values()), 10)
    finally:
        stop.set()
        thread.join(10)
    docs = documents(log)
    assert docs[3]["items"] == [{"id": 9, "order_id": 3}]
    assert docs[3]["_positions"] == {"root": [13, 0], "customer": [30, 0], "items": [[20, 0]]}
    positions = [orjson.loads(r.pos) for r in log.read("shop.views.order_docs", 0, 0, 100)]
    assert positions == sorted(positions)  # every document sorts after the ones before it
    # The sequence starts again at each new high-water position (OpenSearch keeps 16 bits).
    assert positions[-3:] == [[30, 1], [30, 2], [30, 3]]


def test_an_on_column_the_table_lacks_stops_the_view_with_its_yaml_path(
    log: EmbeddedLog,
) -> None:
    pipeline = parse(FILE.replace("{id: order_id}", "{id: order_no}"), {})
    with log.begin() as tx:
        tx.append([change("orders", {"id": 1, "customer_id": 1}, 10)])
    task = ViewTask(
        pipeline,
        pipeline.views[0],
        0,
        log,
        threading.Event(),
        get_logger(),
        store_dir=log.path / "views",
    )
    assert task.report() == {"state": "starting", "reason": None}
    with pytest.raises(ViewMisconfigured) as info:
        task.serve()
    assert str(info.value) == "views[0].embed[1].on.id: public.order_items has no column 'order_no'"
    assert documents(log) == {}
    # What its process's beats carry to cdc status: stopped, with the error.
    assert task.report() == {"state": "stopped", "reason": str(info.value)}


def test_a_retried_session_publishes_the_schema_its_failed_commit_lost(
    log: EmbeddedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = parse(FILE, {})
    with log.begin() as tx:
        tx.append([change("orders", {"id": 1, "customer_id": 1}, 11)])
    original = EmbeddedTransaction.store_group_offsets
    calls: list[int] = []

    def once(self: EmbeddedTransaction, group: str, offsets: Any, consumer: Any) -> None:
        # Fault injection: the first commit fails as a locked log does; the task retries.
        calls.append(1)
        if len(calls) == 1:
            raise LogUnavailable("injected")
        original(self, group, offsets, consumer)

    monkeypatch.setattr(EmbeddedTransaction, "store_group_offsets", once)
    stop, thread = serve(pipeline, log)
    try:
        wait_until(lambda: len(documents(log)) == 1, 10)
    finally:
        stop.set()
        thread.join(10)
    assert len(calls) == 2
    assert SchemaCatalog(log, "shop", wait_s=0).get("views", "order_docs") is not None


def test_a_retrying_task_reports_retrying_with_the_error_redacted_then_running(
    log: EmbeddedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = parse(FILE, {})
    with log.begin() as tx:
        tx.append([change("orders", {"id": 1, "customer_id": 1}, 11)])
    original = EmbeddedTransaction.store_group_offsets
    refusing = threading.Event()
    refusing.set()

    def refuse(self: EmbeddedTransaction, group: str, offsets: Any, consumer: Any) -> None:
        # Fault injection: commits fail as an unreachable log does until the test lets them.
        if refusing.is_set():
            raise LogUnavailable("kafka://app:s3cret@broker:9092 is away")
        original(self, group, offsets, consumer)

    monkeypatch.setattr(EmbeddedTransaction, "store_group_offsets", refuse)
    stop = threading.Event()
    task = ViewTask(
        pipeline, pipeline.views[0], 0, log, stop, get_logger(), poll_timeout_s=0.05,
        store_dir=log.path / "views",
    )  # fmt: skip
    thread = threading.Thread(target=task.serve, daemon=True)
    thread.start()
    try:
        wait_until(lambda: task.report()["state"] == "retrying", 10)
        reason = task.report()["reason"]
        assert reason is not None and "is away" in reason and "s3cret" not in reason
        refusing.clear()
        wait_until(lambda: len(documents(log)) == 1, 30)
        assert task.report() == {"state": "running", "reason": None}
    finally:
        stop.set()
        thread.join(10)
