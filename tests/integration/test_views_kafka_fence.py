"""A live join view's holder paused past its lease, waking mid-batch, on a real Kafka log.

Holder A runs the view and has a batch in flight: its documents, state rows and the group's
offsets are in an open transaction, and it waits before committing, where a paused process
(SIGSTOP, a long stall) would be. Meanwhile holder B (a process of its own: its own log
clients and store directory) wins the view's real lease, starts its term and checks its store
against the state topic. Then A wakes and commits.

Without a fence of its own A's commit went through (its consumer was still a member of the
view's group: KIP-447 refuses it only once B's consumer joined), after B's check: B's store
lacked that batch's rows, B resumed after the batch's offsets, and the documents B wrote later
missed them (here order 3 kept its customer's old name after the rename). With the view's
transactional id claimed at each term's start, before the check, A's commit is fenced, A ends
its term without a new producer, leaves its lease and stands by, and B reads the batch again.

A's lease is a stand-in that still looks held, as a paused process sees its lease when it
wakes: in one process librdkafka's heartbeat thread keeps a real membership alive. Everything
else is real Kafka: the logs, the view's consumer groups, the transactions, B's lease.
"""

from __future__ import annotations

import gc
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog

from cdc.config.models import KafkaLogConfig
from cdc.config.pipeline import Pipeline, parse
from cdc.contracts.errors import LogFatal
from cdc.contracts.schema import Column, TableSchema, schema_record
from cdc.envelope.encode import write_pos
from cdc.log.base import Record, TopicPartition
from cdc.log.kafka import KafkaLog
from cdc.log.kafka.leadership import KafkaLease, view_lease_group
from cdc.log.kafka.txn import WriterSpent
from cdc.views.records import view_group
from cdc.views.standby import ViewGate
from cdc.views.task import ViewTask
from tests.e2e.cli_helpers import wait_for

FILE = """
version: 1
name: {name}
source: {{type: generator, tables: [public.customers, public.orders]}}
log: {{type: kafka, bootstrap_servers: '{servers}', partitions: 1, session_timeout_ms: 6000}}
views:
  - name: docs
    root: public.orders
    embed:
      - {{field: customer, from: public.customers, on: {{customer_id: id}}}}
"""
COLUMNS = {"customers": ("id", "name"), "orders": ("id", "customer_id")}


def _schema(table: str, columns: tuple[str, ...]) -> TableSchema:
    cols = tuple(Column(c, "integer" if c != "name" else "text", key=c == "id") for c in columns)
    return TableSchema("test", "public", table, cols)


def _change(name: str, table: str, row: dict[str, Any], pos: int) -> Record:
    value = {"before": None, "after": row, "op": "c"}
    key = orjson.dumps({"id": row["id"]})
    return Record(f"{name}.public.{table}", key, orjson.dumps(value), write_pos(pos, 0))


class HeldTask(ViewTask):
    """A's view task: once ``hold`` is set, its next batch waits before its commit (its records
    and offsets already in the open transaction) until ``release``; ``outcome`` says how that
    commit ended ("committed", or the error)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold, self.in_flight, self.release = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )
        self.outcome: list[object] = []
        self.terms = 0

    def _term(self) -> None:
        self.terms += 1
        super()._term()

    def _store_offsets(self, tx: Any, offsets: Any, consumer: Any) -> None:
        super()._store_offsets(tx, offsets, consumer)
        if self.hold.is_set():
            self.hold.clear()
            self.in_flight.set()
            self.release.wait()

    def _apply(self, *args: Any) -> Any:
        try:
            done = super()._apply(*args)
        except BaseException as exc:
            self._settled(exc)
            raise
        self._settled("committed")
        return done

    def _settled(self, outcome: object) -> None:
        if self.in_flight.is_set() and not self.outcome:
            self.outcome.append(outcome)


class CheckedTask(ViewTask):
    """B's view task: its first session waits after its store was checked against the state
    topic, before its consumer joins the view's group, until ``go``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checked, self.go = threading.Event(), threading.Event()

    def _serve(self, store: Any) -> None:
        self.checked.set()
        self.go.wait()
        super()._serve(store)


class StaleLease:
    """A's lease as a paused process sees it on waking: still held, though the coordinator gave
    it to B. The lease A joins after that is B's: held by another."""

    def __init__(self, held: bool) -> None:
        self.group = "stale"
        self.held = held
        self.closed = False

    def renew(self, timeout_s: float) -> None:
        time.sleep(timeout_s)

    def leader(self) -> str | None:
        return None if self.held else "B"

    def close(self) -> None:
        self.held, self.closed = False, True


class Holder:
    """One process's view: its own log clients, gate, task (``kind``) and store directory."""

    def __init__(self, pipeline: Pipeline, kind: type[ViewTask], directory: Path, lease: Any):
        self.stop = threading.Event()
        self.log = KafkaLog(pipeline.name, pipeline.log)  # type: ignore[arg-type]
        self.leases: list[Any] = []
        self.errors: list[BaseException] = []

        def open_lease(on_lost: Any) -> Any:
            self.leases.append(lease(on_lost))
            return self.leases[-1]

        self.gate = ViewGate(open_lease, self.stop, structlog.get_logger())
        view = pipeline.views[0]
        self.task = kind(
            pipeline, view, 0, self.log, self.gate.term, structlog.get_logger(),
            poll_timeout_s=0.05, store_dir=directory, gate=self.gate,
        )  # fmt: skip
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            self.task.serve()
        except BaseException as exc:
            self.errors.append(exc)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        self.log.close()


def _documents(log: KafkaLog, name: str) -> dict[int, Any]:
    topic = f"{name}.views.docs"
    docs: dict[int, Any] = {}
    if topic in {t.name for t in log.topics()}:
        for record in log.read(topic, 0, 0, 10_000):
            value = orjson.loads(record.value or b"null")
            docs[orjson.loads(record.key or b"{}")["id"]] = value and value["after"]
    return docs


def _read_all(log: KafkaLog, pipeline: Pipeline) -> bool:
    """Whether the view's group committed offsets past every record of its tables (the
    offsets a transaction leaves are its last record's next: its commit marker's)."""
    committed = log.committed_offsets(view_group(pipeline.name, pipeline.views[0]))
    for table in COLUMNS:
        topic = f"{pipeline.name}.public.{table}"
        last = log.read(topic, 0, 0, 10_000)[-1].offset
        if committed.get(TopicPartition(topic, 0), 0) <= last:
            return False
    return True


def _standing_by(task: ViewTask) -> bool:
    return task.report() == {"state": "standby", "reason": "B runs it"}


def _customers(docs: dict[int, Any]) -> dict[int, Any]:
    return {order: ((doc or {}).get("customer") or {}).get("name") for order, doc in docs.items()}


def test_a_paused_holder_waking_mid_batch_is_fenced_and_the_new_holder_has_every_row(
    kafka_server: Any, tmp_path: Path
) -> None:
    name = f"vf{uuid.uuid4().hex[:8]}"
    pipeline = parse(FILE.format(name=name, servers=kafka_server.bootstrap_servers), {})
    writer = KafkaLog(name, pipeline.log)  # type: ignore[arg-type]
    holders: list[Holder] = []
    try:
        with writer.begin() as tx:
            tx.append([schema_record(name, _schema(t, c)) for t, c in COLUMNS.items()])
            tx.append([_change(name, "customers", {"id": 1, "name": "A"}, 10)])
            tx.append(
                [_change(name, "orders", {"id": n, "customer_id": 1}, 10 + n) for n in (1, 2)]
            )
        stale = iter([StaleLease(True), StaleLease(False)])
        a = Holder(pipeline, HeldTask, tmp_path / "a", lambda on_lost: next(stale))
        holders.append(a)
        held = a.task
        assert isinstance(held, HeldTask)
        wait_for(lambda: _customers(_documents(writer, name)) == {1: "A", 2: "A"}, 120, 0.2)

        held.hold.set()  # A's next batch: order 3, in flight when A "pauses"
        with writer.begin() as tx:
            tx.append([_change(name, "orders", {"id": 3, "customer_id": 1}, 20)])
        assert held.in_flight.wait(60)

        def real_lease(on_lost: Any) -> KafkaLease:
            group = view_lease_group(name, "docs")
            return KafkaLease(pipeline.log, name, "docs", on_lost, group=group)  # type: ignore[arg-type]

        b = Holder(pipeline, CheckedTask, tmp_path / "b", real_lease)
        holders.append(b)
        checked = b.task
        assert isinstance(checked, CheckedTask)
        assert checked.checked.wait(120)  # B won the lease, began its term, checked its store

        held.release.set()  # A wakes and commits its batch
        wait_for(lambda: held.outcome, 60, 0.05)
        wait_for(lambda: held.outcome[0] == "committed" or _standing_by(held), 60, 0.05)
        a.close()  # (on the former code A still ran the view: stopped before B reads)

        checked.go.set()
        with writer.begin() as tx:
            tx.append([_change(name, "customers", {"id": 1, "name": "B"}, 30)])
        wait_for(lambda: _read_all(writer, pipeline), 120, 0.2)
        b.close()

        # B's store holds order 3, so the rename reached its document too; the view topic holds
        # every order's document.
        assert _customers(_documents(writer, name)) == {1: "B", 2: "B", 3: "B"}
        assert checked.rebuilds == 1  # B's store came from the state topic, before A's batch
        (outcome,) = held.outcome
        assert isinstance(outcome, LogFatal) and "fenced" in str(outcome), outcome
        # A ended its term without committing, left its lease, and stands by: one term only.
        assert held.terms == 1 and a.leases[0].closed and _standing_by(held)
        assert a.errors == [] and b.errors == []
    finally:
        for holder in holders:
            holder.close()
        writer.close()


def test_a_fenced_claim_makes_no_new_producer(kafka_server: Any) -> None:
    """A claim fenced by a newer claim of its id fails its commit, then refuses to begin: a new
    producer's ``init_transactions`` would fence the newer claim back (its commit works)."""
    name = f"vf{uuid.uuid4().hex[:8]}"
    servers = kafka_server.bootstrap_servers
    config = KafkaLogConfig(type="kafka", bootstrap_servers=servers, partitions=1)
    topic, tid = f"{name}.t", f"cdc-{name}.view.docs"
    with KafkaLog(name, config) as one, KafkaLog(name, config) as two:
        first = one.claim_writer(tid)
        tx = first.begin()
        tx.append([Record(topic, b"k", b"old")])
        second = two.claim_writer(tid)  # the newer holder's term
        with pytest.raises(LogFatal, match="fenced"):
            tx.commit()
        assert first.spent
        with pytest.raises(WriterSpent):
            first.begin()
        with second.begin() as newer:
            newer.append([Record(topic, b"k", b"new")])
        assert [r.value for r in two.read(topic, 0, 0, 10)] == [b"new"]
        first.close()
        second.close()


def _producer_threads() -> int:
    """librdkafka's main thread, one per live client of this process."""
    tasks = Path("/proc/self/task")
    return sum((task / "comm").read_text().strip() == "rdk:main" for task in tasks.iterdir())


def test_a_fenced_term_leaves_no_producer_behind(kafka_server: Any) -> None:
    """A view survives its fence and goes on, so the fenced producer must go: its failed
    transaction's delivery callback, held by librdkafka, held the producer (a cycle the garbage
    collector cannot see), one live client and its threads a fenced term (review, 2026-12-07)."""
    name = f"vf{uuid.uuid4().hex[:8]}"
    config = KafkaLogConfig(type="kafka", bootstrap_servers=kafka_server.bootstrap_servers)
    topic, tid = f"{name}.t", f"cdc-{name}.view.docs"
    with KafkaLog(name, config) as one, KafkaLog(name, config) as two:
        one.ensure_topics([topic])
        before = _producer_threads()
        for _ in range(3):
            older = one.claim_writer(tid)
            tx = older.begin()
            tx.append([Record(topic, b"k", b"old")])
            newer = two.claim_writer(tid)
            with pytest.raises(LogFatal, match="fenced"):
                tx.commit()
            del tx
            older.close()
            newer.close()
        gc.collect()
        assert _producer_threads() == before
