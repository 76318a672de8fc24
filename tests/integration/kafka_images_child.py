"""A source writer that dies by SIGKILL at a chosen point of a Kafka transaction, for
tests/integration/test_kafka_images.py.

``python -m tests.integration.kafka_images_child BOOTSTRAP PIPELINE STATE_DIR TOPIC WHEN VALUE``
commits nothing itself before the kill: the test commits earlier images from its own process.
``WHEN`` is ``before_commit`` (records produced and flushed, the Kafka transaction open) or
``after_kafka_commit`` (Kafka committed, the store's commit not done).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import orjson

from cdc.config.models import KafkaLogConfig
from cdc.log.base import Record
from cdc.log.kafka import KafkaLog, images


def envelope(key: int, big: str) -> Record:
    after = {"id": key, "big": big}
    value = orjson.dumps({"before": None, "after": after, "source": {}, "op": "u", "ts_ms": 1})
    return Record(sys.argv[4], orjson.dumps({"id": key}), value)


def main() -> None:
    bootstrap, pipeline, state_dir, topic, when, value = sys.argv[1:7]
    config = KafkaLogConfig(type="kafka", bootstrap_servers=bootstrap, session_timeout_ms=6000)
    log = KafkaLog(pipeline, config, Path(state_dir))
    log.claim_source()
    log.source_offsets()
    log.keep_latest({topic: ["big"]})
    if when == "after_kafka_commit":

        def die(self: images.ImageStore, mark: str | None, digest: str) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        images.ImageStore.commit = die  # type: ignore[method-assign]
    tx = log.begin()
    tx.append([envelope(1, value), envelope(2, value)])
    tx.store_offsets({"test": {"step": value}})
    if when == "before_commit":
        assert log.latest_value(topic, orjson.dumps({"id": 1})) is not None
        tx._producer.flush(30)  # the records are on the broker, in the open transaction
        os.kill(os.getpid(), signal.SIGKILL)
    tx.commit()
    raise SystemExit("not killed")


if __name__ == "__main__":
    main()
