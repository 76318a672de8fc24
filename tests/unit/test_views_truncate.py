"""A TRUNCATE of a view's table (cdc/views/store.py ``truncate``, cdc/views/task.py): the
store removes the table's rows older than it a piece at a time and keeps its position as the
table's floor; the task writes their state tombstones and the documents they were in, on a
real embedded log, and a store rebuilt from the state topic keeps the floor."""

from __future__ import annotations

import threading
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
from cdc.log.embedded.txn import EmbeddedTransaction
from cdc.support.logging import get_logger
from cdc.support.wait import wait_until
from cdc.views.join import canonical_key
from cdc.views.store import ViewStore
from cdc.views.task import ViewTask

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
STATE = "shop.__views.order_docs.state"


def key(n: int) -> bytes:
    return canonical_key({"id": n})


def change(table: str, row: dict[str, Any], pos: int) -> Record:
    value = {"before": None, "after": row, "op": "c"}
    return Record(
        f"shop.public.{table}",
        orjson.dumps({"id": row["id"]}),
        orjson.dumps(value),
        write_pos(pos, 0),
    )


def truncate(table: str, pos: int, key: bytes | None = None) -> Record:
    """A truncate as the sources write it: no key (the Kafka log keys it ``{}``), ``op: t``,
    its position beside it."""
    value = {"before": None, "after": None, "op": "t", "source": {"table": table}}
    return Record(f"shop.public.{table}", key, orjson.dumps(value), write_pos(pos, 0))


# -- the store ----------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ViewStore]:
    opened = ViewStore(tmp_path / "view.sqlite", parse(FILE, {}).views[0])
    opened.begin()
    opened.apply("public.customers", key(1), {"id": 1, "name": "A"}, (1, 0))
    for n in (1, 2):
        opened.apply("public.orders", key(n), {"id": n, "customer_id": 1}, (1 + n, 0))
    for n in range(1, 6):
        opened.apply("public.order_items", key(n), {"id": n, "order_id": 1 + n % 2}, (10 + n, 0))
    # Newer than the truncate at 40 below: read before it, from another partition.
    opened.apply("public.order_items", key(6), {"id": 6, "order_id": 2}, (50, 0))
    opened.commit(None, None, 0)
    yield opened
    opened.close()


def _touched(store: ViewStore) -> dict[bytes, Any]:
    return {k: doc for piece in store.touched() for k, doc in piece}


def test_an_embedded_tables_truncate_removes_its_older_rows_in_pieces(store: ViewStore) -> None:
    store.begin()
    pieces = list(store.truncate("public.order_items", (40, 0), piece=2))
    assert [len(p) for p in pieces] == [2, 2, 1]  # item 6 is read, and stays
    assert sorted(k for p in pieces for k in p) == sorted(key(n) for n in range(1, 6))
    docs = _touched(store)
    assert set(docs) == {key(1), key(2)}
    assert docs[key(1)]["items"] == []
    assert docs[key(2)]["items"] == [{"id": 6, "order_id": 2}]
    assert store.floor("public.order_items") == (40, 0)
    # The floor: an older change read after the truncate is not applied, a newer one is.
    assert not store.apply("public.order_items", key(7), {"id": 7, "order_id": 1}, (30, 0))
    assert store.apply("public.order_items", key(8), {"id": 8, "order_id": 1}, (41, 0))
    assert list(store.truncate("public.order_items", (40, 0))) == []  # a replay: nothing
    store.rollback()  # the floor goes with the transaction
    assert store.floor("public.order_items") is None
    assert len(_document(store, 1)["items"]) == 2


def _document(store: ViewStore, n: int) -> Any:
    doc = store.document(key(n))
    assert doc is not None
    return doc


def test_a_root_or_one_to_one_truncate_deletes_documents_or_empties_the_field(
    store: ViewStore,
) -> None:
    store.begin()
    assert list(store.truncate("public.customers", (40, 0))) == [[key(1)]]
    assert {k: d["customer"] for k, d in _touched(store).items()} == {key(1): None, key(2): None}
    store.commit(None, None, 0)
    store.begin()
    assert list(store.truncate("public.orders", (41, 0))) == [[key(1), key(2)]]
    assert _touched(store) == {key(1): None, key(2): None}  # each document deleted
    store.commit(None, None, 0)
    assert list(store.roots()) == []
    assert store.floor("public.customers") == (40, 0)


# -- the task on a real embedded log ------------------------------------------------------------


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EmbeddedLog]:
    with EmbeddedLog(tmp_path / "log") as opened:
        with opened.begin() as tx:
            tx.append([schema_record("shop", _schema(t, c)) for t, c in COLUMNS.items()])
        yield opened


def _schema(table: str, columns: tuple[str, ...]) -> TableSchema:
    cols = tuple(Column(c, "integer" if c != "name" else "text", key=c == "id") for c in columns)
    return TableSchema("test", "public", table, cols)


def write(log: EmbeddedLog, records: list[Record]) -> None:
    with log.begin() as tx:
        tx.append(records)


def documents(log: EmbeddedLog) -> dict[int, Any]:
    docs: dict[int, Any] = {}
    for record in log.read("shop.views.order_docs", 0, 0, 10_000):
        after = None if record.value is None else orjson.loads(record.value)["after"]
        docs[orjson.loads(record.key)["id"]] = after
    return {k: d for k, d in docs.items() if d is not None}


def caught_up(log: EmbeddedLog) -> bool:
    committed = log.committed_offsets("shop.view.order_docs")
    for table in COLUMNS:
        topic = f"shop.public.{table}"
        for tp_partition, end in log.end_offsets(topic).items():
            done = {tp.partition: o for tp, o in committed.items() if tp.topic == topic}
            if end and done.get(tp_partition, 0) < end:
                return False
    return True


def run_until_caught_up(pipeline: Pipeline, log: EmbeddedLog) -> ViewTask:
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
    thread = threading.Thread(target=task.serve, daemon=True)
    thread.start()
    try:
        wait_until(lambda: caught_up(log), 30, 0.05, describe="the view caught up")
    finally:
        stop.set()
        thread.join(30)
    return task


def _state(log: EmbeddedLog) -> dict[bytes, Any]:
    """The state topic's current records (a key's last wins), the counters left out."""
    state: dict[bytes, Any] = {}
    for record in log.read(STATE, 0, 0, 10_000):
        assert record.key is not None
        state[record.key] = record.value
    return {k: v for k, v in state.items() if v is not None and b"meta" not in k}


def test_truncates_leave_the_view_equal_to_the_join_and_survive_a_rebuild(
    log: EmbeddedLog,
) -> None:
    pipeline = parse(FILE, {})
    write(log, [change("customers", {"id": c, "name": f"c{c}"}, c) for c in (1, 2)])
    write(log, [change("orders", {"id": n, "customer_id": 1 + n % 2}, 10 + n) for n in range(1, 5)])
    write(log, [change("order_items", {"id": n, "order_id": n}, 20 + n) for n in range(1, 5)])
    run_until_caught_up(pipeline, log)
    assert {d["items"][0]["id"] for d in documents(log).values()} == {1, 2, 3, 4}
    # One batch: an item newer than the truncate read before it (another partition), the
    # truncate, an older item read after it (skipped), and a newer one (applied after it).
    write(
        log,
        [
            change("order_items", {"id": 5, "order_id": 1}, 45),
            truncate("order_items", 40),
            change("order_items", {"id": 6, "order_id": 2}, 30),
            change("order_items", {"id": 7, "order_id": 2}, 46),
            truncate("customers", 47, b"{}"),  # as on Kafka
        ],
    )
    run_until_caught_up(pipeline, log)
    docs = documents(log)
    assert {n: d["items"] for n, d in docs.items()} == {
        1: [{"id": 5, "order_id": 1}],
        2: [{"id": 7, "order_id": 2}],
        3: [],
        4: [],
    }
    assert all(d["customer"] is None for d in docs.values())
    # The root's truncate deletes every document; an order inserted after it stays.
    write(log, [truncate("orders", 60), change("orders", {"id": 9, "customer_id": 1}, 61)])
    run_until_caught_up(pipeline, log)
    assert documents(log) == {
        9: {
            "id": 9,
            "customer_id": 1,
            "customer": None,
            "items": [],
            "_positions": {"root": [61, 0], "customer": None, "items": []},
        }
    }
    deleted = [r for r in log.read("shop.views.order_docs", 0, 0, 10_000) if r.value is None]
    assert sorted(orjson.loads(r.key)["id"] for r in deleted) == [1, 2, 3, 4]
    state = _state(log)
    assert sorted(k for k in state if k.startswith(b'{"t":"public.orders"')) == [
        b'{"t":"public.orders","k":{"id":9}}'
    ]
    assert orjson.loads(state[b'{"truncated":"public.orders"}']) == {"pos": [60, 0]}
    # Rebuilt from the state topic, the store keeps the floors: an order older than the
    # orders' truncate, read now, is not applied.
    for suffix in ("", "-wal", "-shm"):
        Path(f"{log.path / 'views' / 'order_docs.sqlite'}{suffix}").unlink(missing_ok=True)
    write(log, [change("orders", {"id": 3, "customer_id": 1}, 55)])
    write(log, [change("order_items", {"id": 8, "order_id": 9}, 70)])
    assert run_until_caught_up(pipeline, log).rebuilds == 1
    assert set(documents(log)) == {9}
    assert documents(log)[9]["items"] == [{"id": 8, "order_id": 9}]


def test_a_failed_commit_of_a_truncate_leaves_nothing_and_the_retry_applies_it(
    log: EmbeddedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = parse(FILE, {})
    write(log, [change("customers", {"id": 1, "name": "A"}, 1)])
    write(log, [change("orders", {"id": n, "customer_id": 1}, 10 + n) for n in range(1, 4)])
    run_until_caught_up(pipeline, log)
    state_end, view_end = log.end_offsets(STATE), log.end_offsets("shop.views.order_docs")
    write(log, [truncate("orders", 20), change("orders", {"id": 7, "customer_id": 1}, 21)])
    original = EmbeddedTransaction.store_group_offsets
    calls: list[int] = []

    def once(self: EmbeddedTransaction, group: str, offsets: Any, consumer: Any) -> None:
        # Fault injection: the truncate's batch fails at its commit, after its tombstones and
        # documents were appended; the session is retried.
        calls.append(1)
        if len(calls) == 1:
            raise LogUnavailable("injected")
        original(self, group, offsets, consumer)

    monkeypatch.setattr(EmbeddedTransaction, "store_group_offsets", once)
    task = run_until_caught_up(pipeline, log)
    assert len(calls) == 2 and task.rebuilds == 0  # the store rolled back with the log
    assert set(documents(log)) == {7}
    # Written once: three deletes with their tombstones and one document; in the state, three
    # tombstones, the order, the floor and the counters.
    assert log.end_offsets("shop.views.order_docs")[0] == view_end[0] + 7
    assert log.end_offsets(STATE)[0] == state_end[0] + 6
