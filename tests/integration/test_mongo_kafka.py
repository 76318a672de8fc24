"""A MongoDB document too large for the log (a Kafka topic with ``max.message.bytes``) follows
the pipeline's ``bad_records`` choice: a dead-letter entry and the other documents flow on, or a
stop that names the collection and the key. Runs the runtime's source task on a real broker."""

from __future__ import annotations

import contextlib
import threading
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog import get_logger

from cdc.config.models import KafkaLogConfig
from cdc.contracts.events import topic_name
from cdc.contracts.schema import dead_letter_topic
from cdc.contracts.source import SourceContext
from cdc.log.kafka import KafkaLog
from cdc.runtime.source_task import BadRecordStop, SourceTask
from cdc.testing import WaitTimeout, wait_until
from connectors.mongodb import MongoSource, MongoSourceConfig
from tests.integration.mongo_kit import database, into_next_second, scope

pytestmark = pytest.mark.timeout(180)


def _read(log: KafkaLog, topic: str) -> list[Any]:
    out = []
    for partition in log.end_offsets(topic):
        out.extend(log.read(topic, partition, 0, 1000))
    return out


@pytest.mark.parametrize("policy", ["dead_letter", "fail"])
def test_a_document_too_large_for_the_log_follows_the_policy(
    mongo_server: Any, kafka_server: Any, tmp_path: Path, policy: str
) -> None:
    pipeline = f"mk{uuid.uuid4().hex[:8]}"
    log = KafkaLog(pipeline, _log_of_small_messages(kafka_server))
    with database(mongo_server.uri) as db:
        _insert_three_documents_one_too_large(db)
        table = f"{db.name}.docs"
        task, stop = _source_task(pipeline, log, mongo_server, table, policy)
        errors = _run_until_the_snapshot_is_done(task, stop, log)
        records = _read(log, topic_name(pipeline, db.name, "docs"))
        letters = _read(log, dead_letter_topic(pipeline))
    log.close()
    if policy == "fail":
        assert len(errors) == 1 and isinstance(errors[0], BadRecordStop)
        assert table in str(errors[0]) and '{"_id":2}' in str(errors[0])
        assert records == []
        return
    assert errors == []
    assert sorted(orjson.loads(r.key)["_id"] for r in records) == [1, 3]
    (letter,) = letters
    assert orjson.loads(letter.value)["key"] == {"_id": 2}


def _log_of_small_messages(kafka_server: Any) -> KafkaLogConfig:
    return KafkaLogConfig(
        type="kafka",
        bootstrap_servers=kafka_server.bootstrap_servers,
        partitions=1,
        session_timeout_ms=6000,
        topic_properties={"max.message.bytes": "20000"},
    )


def _insert_three_documents_one_too_large(db: Any) -> None:
    db.docs.insert_many(
        [{"_id": 1, "v": "small"}, {"_id": 2, "v": "x" * 30_000}, {"_id": 3, "v": "ok"}]
    )
    # mongo-java-server starts streams at a whole second: without the pause the inserts above
    # would be streamed again after the snapshot (harmless, but this test counts records).
    into_next_second()


def _source_task(
    pipeline: str, log: KafkaLog, mongo_server: Any, table: str, policy: str
) -> tuple[SourceTask, threading.Event]:
    source_config = MongoSourceConfig.model_validate(
        {"dsn": mongo_server.uri, "tables": [table], "stream_scope": scope(mongo_server)}
    )
    context = SourceContext(pipeline, log, get_logger(), policy, "initial")
    stop = threading.Event()
    task = SourceTask(
        pipeline,
        log,
        lambda: MongoSource(source_config, context),
        stop,
        get_logger(),
        bad_records=policy,
    )
    return task, stop


def _run_until_the_snapshot_is_done(
    task: SourceTask, stop: threading.Event, log: KafkaLog
) -> list[Exception]:
    """Runs the task in a thread until the snapshot is stored or it fails (60 s at most).

    Returns:
        What the task raised, if anything.
    """
    errors: list[Exception] = []

    def run() -> None:
        try:
            task.run()
        except Exception as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    with contextlib.suppress(WaitTimeout):  # what the snapshot lacks, the caller's checks say
        wait_until(
            lambda: errors or "last_snapshot" in log.source_offsets().get("mongodb", {}), 60, 0.2
        )
    stop.set()
    thread.join(30)
    return errors
