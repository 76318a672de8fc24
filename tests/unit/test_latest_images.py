"""The latest-image store without a broker: projection of envelopes, transactions that a
rollback or a crash undoes, truncates, and the offsets digest (see cdc/log/kafka/images.py)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sqlite3
from pathlib import Path

import orjson
import pytest

from cdc.log.base import Record
from cdc.log.kafka.image_sync import SourceImages
from cdc.log.kafka.images import (
    FILE_NAME,
    UPSERT_ROWS,
    Change,
    ImageStore,
    fingerprint,
    project,
)

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


def _reference_project(value: bytes | None, fields: list[str]) -> tuple[Change, object]:
    """The projection as the whole value parsed gives it (what project() replaced)."""
    if value is None:
        return Change.DELETE, None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return Change.SKIP, None
    if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
        doc = doc["payload"]
    if not isinstance(doc, dict) or doc.get("op") == "t":
        return Change.SKIP, None
    after = doc.get("after")
    if not isinstance(after, dict):
        return Change.DELETE, None
    return Change.PUT, {name: after[name] for name in fields if name in after}


def test_project_agrees_with_parsing_the_whole_value() -> None:
    # project() copies the kept fields' JSON text without parsing the envelope: every shape
    # must give what parsing it whole gives.
    after = {
        "big": "x" * 5000 + ' "quoted" \\ \u00e9 é 😀 {"after": 1}',
        "note": None,
        "doc": {"after": {"big": 1}, "op": "t", "list": [1, 2.5, -3e-7, True, None]},
        "n": 12345678901234,
        "f": 1.5,
        "f0": "a column named as the decoder's own fields are",
        "with space": [],
    }
    fields = ["big", "note", "doc", "f", "missing", "with space", "f0"]
    envelopes = [
        envelope("u", after),
        envelope("r", {"id": 1}),
        envelope("d", None),
        envelope("t", None),
        b'{"op": "c", "after": {"big": "spaced" , "note" : [ 1 , 2 ] }, "source": {"op": "t"}}',
        b'{"after": {"big": 1}}',  # no op
        b'{"op": "c"}',  # no after
        b'{"op": "\\u0074", "after": {"big": 1}}',  # a truncate, its op escaped
        b'{"op": null, "after": {"big": 1}}',
        b'{"op": "c", "after": [1, 2]}',
        b'{"op": "c", "after": "text"}',
        orjson.dumps({"schema": {"type": "struct"}, "payload": orjson.loads(envelope("c", after))}),
        orjson.dumps({"schema": None, "payload": orjson.loads(envelope("t", None))}),
        orjson.dumps({"schema": {}, "payload": [1]}),
        orjson.dumps({"payload": {"after": {"big": "not wrapped"}}, "after": {"big": "top"}}),
        b"[1, 2]",
        b'"a string"',
        b"null",
        b"not json",
        b'{"op": "c", "after": {"big": 1}',  # cut short
        None,
    ]
    for value in envelopes:
        change, image = project(value, fields)
        assert (change, None if image is None else orjson.loads(image)) == _reference_project(
            value, fields
        ), value


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


def test_apply_with_topics_interleaved_keeps_each_topics_fields(tmp_path: Path) -> None:
    # apply() looks a topic's fields and id up once per run of records of that topic.
    store = ImageStore(tmp_path / FILE_NAME)
    second, undeclared = "p.public.second", "p.public.undeclared"
    fields = {**FIELDS, second: ["n"]}
    key1 = orjson.dumps({"id": 1})

    def other(topic: str, big: str) -> Record:
        return Record(topic, key1, envelope("u", {"id": 1, "big": big, "n": big}))

    records = [
        other(second, "s1"),
        put(1, "a"),
        other(undeclared, "u1"),
        Record(TOPIC, b"{}", envelope("t", None)),  # a truncate between two puts of TOPIC
        put(1, "b"),
        other(second, "s2"),
        Record(TOPIC, None, envelope("c", {"big": "keyless"})),
        other(undeclared, "u2"),
    ]
    assert store.apply(records, fields) == 4
    assert image(store, 1) == {"big": "b", "note": "n"}
    assert orjson.loads(store.get(second, key1) or b"") == {"n": "s2"}
    assert store.get(undeclared, key1) is None
    assert store.topics() == {TOPIC: ["big", "note"], second: ["n"]}


def test_later_batches_replace_earlier_images_in_statements_of_many_rows(tmp_path: Path) -> None:
    # Upserts go UPSERT_ROWS rows a statement, the rest one by one; an unchanged image is not
    # rewritten, a changed one always is.
    store = ImageStore(tmp_path / FILE_NAME)
    keys = range(UPSERT_ROWS * 2 + 7)
    assert store.apply([put(k, f"first {k}") for k in keys], FIELDS) == len(keys)
    store.apply([put(k, f"first {k}" if k % 2 else f"second {k}") for k in keys], FIELDS)
    assert all(image(store, k) == {"big": f"first {k}", "note": "n"} for k in keys if k % 2)
    assert all(image(store, k) == {"big": f"second {k}", "note": "n"} for k in keys if k % 2 == 0)
    store.apply([put(k, f"first {k}", note=None) for k in keys], FIELDS)
    assert all(image(store, k) == {"big": f"first {k}", "note": None} for k in keys)
    assert store.count(TOPIC) == len(keys)


def test_a_write_that_fails_is_never_committed_and_rolls_back(tmp_path: Path) -> None:
    # A failed upsert must surface before anything of its transaction is committed (whether
    # upserts run on the caller's thread or later on one of their own), and a rollback undoes
    # the rest of the transaction.
    store = ImageStore(tmp_path / FILE_NAME)
    store.apply([put(1, "kept")], FIELDS)
    store.commit("m1", "d1")
    refused = orjson.dumps({"id": 2}).hex()
    with contextlib.closing(sqlite3.connect(tmp_path / FILE_NAME)) as other:
        other.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON images WHEN NEW.key = X'{refused}'"
            " BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
        other.commit()
    with pytest.raises(sqlite3.Error, match="refused"):
        store.apply([put(3, "written"), put(2, "refused")], FIELDS)
        store.commit("m2", "d2")
    store.rollback()
    assert store.mark() == ("m1", "d1")
    assert image(store, 3) is None and image(store, 1) == {"big": "kept", "note": "n"}
    store.apply([put(3, "again")], FIELDS)  # the store goes on
    store.commit("m3", "d3")
    assert image(store, 3) == {"big": "again", "note": "n"}
    store.close()


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
