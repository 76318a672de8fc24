"""The jsonl sink's table reset, on real files: the topic's file emptied, its offsets 0, durably."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.log.base import TopicPartition
from cdc.support.logging import get_logger
from sinks.jsonl import JsonlSinkPlugin

ITEMS, OTHER = "p.public.items", "p.public.other"


def sink(path: Path) -> object:
    config = JsonlSinkPlugin.config_model(name="files", type="jsonl", path=str(path))
    context = SinkContext("p", "files", [("public", "items")], _NoSchemas(), get_logger())
    opened = JsonlSinkPlugin.create(config, context)
    opened.open()
    return opened


class _NoSchemas:
    def get(self, schema: str, table: str) -> None:
        return None


def record(topic: str, partition: int, offset: int) -> SinkRecord:
    return SinkRecord(
        topic, partition, offset, {"id": offset}, {"op": "c", "after": {"id": offset}}
    )


def lines(path: Path, topic: str) -> list[int]:
    return [
        orjson.loads(line)["offset"] for line in (path / f"{topic}.jsonl").read_bytes().splitlines()
    ]


def test_reset_empties_the_topics_file_and_stores_offset_zero(tmp_path: Path) -> None:
    files: Any = sink(tmp_path)
    files.write(
        [record(ITEMS, 0, 0), record(ITEMS, 1, 0), record(ITEMS, 0, 1), record(OTHER, 0, 0)]
    )
    files.flush()
    partitions = [TopicPartition(ITEMS, 0), TopicPartition(ITEMS, 1)]
    files.reset_table(("public", "items"), partitions)
    assert lines(tmp_path, ITEMS) == [] and lines(tmp_path, OTHER) == [0]
    assert files.stored_offsets() == {**dict.fromkeys(partitions, 0), TopicPartition(OTHER, 0): 1}
    files.write([record(ITEMS, 0, 0)])  # the rebuild, appended to the emptied file
    files.flush()
    files.close()
    reopened: Any = sink(tmp_path)  # durable, and the file is not cut back to its old length
    assert reopened.stored_offsets()[TopicPartition(ITEMS, 1)] == 0
    assert lines(tmp_path, ITEMS) == [0] and lines(tmp_path, OTHER) == [0]
    reopened.close()
