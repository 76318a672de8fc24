"""The latest-image store without a broker: projection of envelopes, transactions that a
rollback or a crash undoes, truncates, and the offsets digest (see cdc/log/kafka/images.py)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import orjson

from cdc.log.base import Record
from cdc.log.kafka.image_sync import SourceImages
from cdc.log.kafka.images import FILE_NAME, Change, ImageStore, fingerprint, project

TOPIC = "p.public.docs"
FIELDS = {TOPIC: ["big", "note"]}


def envelope(op: str, after: dict[str, object] | None) -> bytes:
    return orjson.dumps({"before": None, "after": after, "source": {}, "op": op, "ts_ms": 1})


def put(key: int, big: str, note: str | None = "n", op: str = "u") -> Record:
    after = {"id": key, "big": big, "note": note, "n": 7}
    return Record(TOPIC, orjson.dumps({"id": key}), envelope(op, after))


def image(store: ImageStore, key: int) -> dict[str, object] | None:
    raw = store.get(TOPIC, orjson.dumps({"id": key}))
    return None if raw is None else orjson.loads(raw)


def test_project_keeps_the_declared_fields_of_after() -> None:
    change, kept = project(envelope("u", {"id": 1, "big": "x", "note": None, "n": 2}), ["big"])
    assert change is Change.PUT and orjson.loads(kept or b"") == {"big": "x"}
    # A NULL is a value as of the change; a column the row lacks is left out.
    _, kept = project(envelope("c", {"id": 1, "note": None}), ["big", "note"])
    assert orjson.loads(kept or b"") == {"note": None}
    wrapped = orjson.dumps({"schema": {}, "payload": orjson.loads(envelope("r", {"big": "y"}))})
    assert orjson.loads(project(wrapped, ["big"])[1] or b"") == {"big": "y"}


def test_project_deletes_and_tombstones_drop_a_key_and_a_truncate_changes_nothing() -> None:
    assert project(envelope("d", None), ["big"]) == (Change.DELETE, None)
    assert project(None, ["big"]) == (Change.DELETE, None)
    # A truncated key comes back only through an insert, which carries every value.
    assert project(envelope("t", None), ["big"]) == (Change.SKIP, None)
    assert project(b"not json", ["big"]) == (Change.SKIP, None)


def test_apply_in_order_and_only_declared_topics(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / FILE_NAME)
    key1 = orjson.dumps({"id": 1})
    other = Record("p.public.other", key1, envelope("c", {"id": 1, "big": "no"}))
    applied = store.apply(
        [put(1, "a"), put(1, "b"), put(2, "c"), Record(TOPIC, key1, None), put(1, "d"), other],
        FIELDS,
    )
    assert applied == 5
    assert image(store, 1) == {"big": "d", "note": "n"}
    assert image(store, 2) == {"big": "c", "note": "n"}
    assert store.get("p.public.other", key1) is None
    truncate = Record(TOPIC, b"{}", envelope("t", None))
    assert store.apply([truncate], FIELDS) == 0
    assert image(store, 1) == {"big": "d", "note": "n"}


def test_reads_see_the_open_transaction_and_a_rollback_undoes_it(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / FILE_NAME)
    store.apply([put(1, "committed")], FIELDS)
    store.commit("m1", "d1")
    store.begin()
    store.apply([put(1, "open"), put(2, "open")], FIELDS)
    assert image(store, 1) == {"big": "open", "note": "n"}
    store.rollback()
    assert image(store, 1) == {"big": "committed", "note": "n"}
    assert image(store, 2) is None
    assert store.mark() == ("m1", "d1")


def _crash_mid_transaction(path: str) -> None:
    store = ImageStore(Path(path))
    store.apply([put(1, "committed")], FIELDS)
    store.commit("m1", "d1")
    store.apply([put(1, "uncommitted"), put(2, "uncommitted")], FIELDS)
    # Enough to spill pages into the write-ahead log before the kill.
    store.apply([put(k, "x" * 5000) for k in range(10, 400)], FIELDS)
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_sigkill_mid_transaction_leaves_only_what_was_committed(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    child = multiprocessing.get_context("spawn").Process(
        target=_crash_mid_transaction, args=(str(path),)
    )
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    store = ImageStore(path)
    assert store.mark() == ("m1", "d1")
    assert image(store, 1) == {"big": "committed", "note": "n"}
    assert image(store, 2) is None and store.count(TOPIC) == 1


def test_forget_set_fields_and_clear(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / FILE_NAME)
    store.set_fields(TOPIC, ["big"])
    store.set_fields("p.public.b", ["x"])
    store.apply([put(1, "a")], FIELDS)
    store.commit(None, "d")
    assert store.topics() == {TOPIC: ["big"], "p.public.b": ["x"]}
    store.forget(TOPIC)
    assert store.topics() == {"p.public.b": ["x"]} and image(store, 1) is None
    store.clear()
    store.commit(None, "d")
    assert store.topics() == {}


def test_an_orphaned_write_ahead_log_is_not_replayed_into_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    wal = path.with_name(FILE_NAME + "-wal")
    wal.write_bytes(b"stale frames")
    ImageStore(path).close()
    assert not wal.exists() or wal.read_bytes() != b"stale frames"


def test_fingerprint_ignores_key_order() -> None:
    assert fingerprint({"a": 1, "b": {"x": 1, "y": 2}}) == fingerprint(
        {"b": {"y": 2, "x": 1}, "a": 1}
    )
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})


class _CountingLog:
    """Stands in for KafkaLog's two calls the image keeper makes (no broker needed for what is
    tested: which topics get restored, and when); the real broker runs in
    tests/integration/test_kafka_images.py."""

    def __init__(self, keeper: SourceImages | None = None) -> None:
        self.keeper = keeper
        self.scanned: list[str] = []

    def source_offsets(self) -> dict[str, object]:
        assert self.keeper is not None
        self.keeper.offsets_read(None, {})
        return {}

    def scan_committed(self, topic: str, batch: int, apply: object) -> None:
        self.scanned.append(topic)


def test_a_topic_declared_mid_transaction_starts_empty_instead_of_being_restored(
    tmp_path: Path,
) -> None:
    log = _CountingLog()
    keeper = SourceImages(log, tmp_path)  # type: ignore[arg-type]
    log.keeper = keeper
    keeper.declare(FIELDS)
    assert log.scanned == [TOPIC]  # at open: restored from the topic
    keeper.began()
    other = "p.public.notes"
    keeper.declare({**FIELDS, other: ["body"]})  # a Relation message inside the transaction
    assert log.scanned == [TOPIC]  # no topic read inside the open Kafka transaction
    assert keeper.lookup(other, b'{"id": 1}') is None
    keeper.appended([Record(other, b'{"id": 1}', envelope("c", {"id": 1, "body": "long"}))])
    assert keeper.lookup(other, b'{"id": 1}') == b'{"after":{"body":"long"}}'
    keeper.committed(keeper.new_mark(), {"postgres": {"lsn": 1}})
    keeper.close()
