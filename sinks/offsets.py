"""Offsets a sink keeps beside its data, and the atomic file replace the file-based sinks use.

A stored offset is named ``<topic>|<partition>`` (``|`` cannot occur in a topic name; the
partition is after the last one), in the JSONL sink's state file, the search sink's offsets file
and the Redis sink's offsets hash alike.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from cdc.log.base import TopicPartition


def offset_field(topic: str, partition: int) -> str:
    """The stored name of a partition's offset."""
    return f"{topic}|{partition}"


def parse_offsets(stored: Iterable[tuple[str, int | str | bytes]]) -> dict[TopicPartition, int]:
    """``(field, next offset)`` pairs as stored, back as offsets by partition."""
    offsets: dict[TopicPartition, int] = {}
    for field, offset in stored:
        topic, _, partition = field.rpartition("|")
        offsets[TopicPartition(topic, int(partition))] = int(offset)
    return offsets


def replace_file(path: Path, data: bytes, temp: Path) -> None:
    """Replace ``path`` with ``data`` atomically and durably: a crash leaves old or new whole.

    ``data`` is written to ``temp`` and synced, renamed over ``path``, then the directory is
    synced so the rename itself survives a crash.
    """
    with temp.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
