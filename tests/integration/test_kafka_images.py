"""Key look-ups on the Kafka log from the source's latest-image store, against a real broker:
what the open transaction appended, what an abort leaves, a restore from the topics, and the two
crash points (SIGKILL with the Kafka transaction open, and between the Kafka commit and the
store's commit). See cdc/log/kafka/image_sync.py."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.config.models import KafkaLogConfig
from cdc.log.base import Record
from cdc.log.kafka import KafkaLog
from cdc.log.kafka.image_sync import MARK_KEY
from cdc.log.kafka.images import FILE_NAME
from tests.e2e.cli_helpers import cdc_env

FIELDS = ["big"]


class Source:
    """A source-side Kafka log: claimed, offsets read, the topic declared."""

    def __init__(self, bootstrap: str, pipeline: str, state: Path, topic: str) -> None:
        config = KafkaLogConfig(type="kafka", bootstrap_servers=bootstrap, session_timeout_ms=6000)
        self.log = KafkaLog(pipeline, config, state)
        self.topic = topic
        self.log.claim_source()
        self.offsets = self.log.source_offsets()
        self.log.keep_latest({topic: FIELDS})

    def big(self, key: int) -> str | None:
        value = self.log.latest_value(self.topic, orjson.dumps({"id": key}))
        return None if value is None else orjson.loads(value)["after"]["big"]

    def commit(self, *records: Record, step: str = "x") -> None:
        with self.log.begin() as tx:
            tx.append(list(records))
            tx.store_offsets({"test": {"step": step}})


def change(topic: str, key: int, big: str | None, op: str = "u") -> Record:
    after = None if big is None else {"id": key, "big": big, "small": 1}
    value = orjson.dumps({"before": None, "after": after, "source": {}, "op": op, "ts_ms": 1})
    return Record(topic, orjson.dumps({"id": key}), value)


@pytest.fixture
def names(kafka_server: Any, tmp_path: Path) -> Iterator[tuple[str, str, Path, str]]:
    pipeline = f"img_{uuid.uuid4().hex[:10]}"
    yield kafka_server.bootstrap_servers, pipeline, tmp_path / "state", f"{pipeline}.public.docs"


def test_look_ups_see_the_open_transaction_and_never_an_aborted_one(
    names: tuple[str, str, Path, str],
) -> None:
    source = Source(*names)
    topic = source.topic
    try:
        source.commit(change(topic, 1, "v1"), change(topic, 2, "v1"))
        assert (source.big(1), source.big(2), source.big(3)) == ("v1", "v1", None)
        tx = source.log.begin()
        tx.append([change(topic, 1, "open"), change(topic, 2, None, "d")])
        assert (source.big(1), source.big(2)) == ("open", None)
        tx.abort()
        assert (source.big(1), source.big(2)) == ("v1", "v1")
        source.commit(change(topic, 2, None, "d"), Record(topic, orjson.dumps({"id": 2}), None))
        assert (source.big(1), source.big(2)) == ("v1", None)
        # The commit mark rides in the offsets topic, but is no source offset.
        assert MARK_KEY not in source.log.source_offsets()
        assert source.log.source_offsets()["test"] == {"step": "x"}
    finally:
        source.log.close()


def test_a_deleted_store_is_restored_from_the_topics(names: tuple[str, str, Path, str]) -> None:
    _, _, state, topic = names
    source = Source(*names)
    source.commit(*(change(topic, k, f"a{k}") for k in range(300)))
    source.commit(change(topic, 5, "b5"), change(topic, 6, None, "d"))
    source.log.close()
    for path in state.glob(FILE_NAME + "*"):
        path.unlink()
    source = Source(*names)
    try:
        assert (source.big(5), source.big(6), source.big(7), source.big(299)) == (
            "b5",
            None,
            "a7",
            "a299",
        )
    finally:
        source.log.close()


def run_child(names: tuple[str, str, Path, str], when: str, value: str) -> None:
    bootstrap, pipeline, state, topic = names
    argv = [bootstrap, pipeline, str(state), topic, when, value]
    child = subprocess.run(
        [sys.executable, "-m", "tests.integration.kafka_images_child", *argv],
        env=cdc_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stdout + child.stderr


def test_sigkill_with_the_transaction_open_leaves_nothing_of_it(
    names: tuple[str, str, Path, str],
) -> None:
    source = Source(*names)
    source.commit(change(source.topic, 1, "committed"), step="1")
    source.log.close()
    run_child(names, "before_commit", "aborted")
    source = Source(*names)  # fences the dead producer: its transaction is aborted
    try:
        assert source.offsets["test"] == {"step": "1"}
        assert (source.big(1), source.big(2)) == ("committed", None)
    finally:
        source.log.close()


def test_sigkill_between_the_kafka_commit_and_the_stores_rebuilds_the_store(
    names: tuple[str, str, Path, str],
) -> None:
    source = Source(*names)
    source.commit(change(source.topic, 1, "before"), step="1")
    source.log.close()
    run_child(names, "after_kafka_commit", "committed")
    source = Source(*names)
    try:
        # Kafka holds the transaction, the store does not: its mark differs, it is rebuilt.
        assert source.offsets["test"] == {"step": "committed"}
        assert (source.big(1), source.big(2)) == ("committed", "committed")
    finally:
        source.log.close()


def test_other_threads_and_undeclared_topics_cannot_look_up(
    names: tuple[str, str, Path, str],
) -> None:
    import threading

    source = Source(*names)
    try:
        source.commit(change(source.topic, 1, "v"))
        with pytest.raises(NotImplementedError):
            source.log.latest_value(f"{source.topic}_other", orjson.dumps({"id": 1}))
        caught: list[BaseException] = []

        def other() -> None:
            try:
                source.log.latest_value(source.topic, orjson.dumps({"id": 1}))
            except NotImplementedError as exc:
                caught.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert caught
    finally:
        source.log.close()
