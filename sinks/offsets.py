"""Offsets a sink keeps beside its data: their one codec, and the atomic file replace the
file-based sinks use.

A stored offset is the next offset of a partition, named ``<topic>|<partition>`` (``|`` cannot
occur in a topic name; the partition is after the last one): the members of the search sink's
offsets file and of the ``"offsets"`` of the JSONL sink's state file, the fields of the Redis
sink's offsets hash. :func:`encode_offsets` and :func:`decode_offsets` are its one writer and
reader; :func:`read_json` and :func:`write_json` the file sinks' reading and durable writing of
their JSON files. (The DuckDB sink keeps its offsets in a table of its own, with the data.)

Beside the offsets, under :data:`POSITION_FIELD` (no ``|``: no partition's name), a sink may
keep the source position its data is consistent up to, written in the same atomic write
(:class:`cdc.contracts.sink.PositionedSink`): the Redis sink's offsets hash, the search sink's
offsets file and the JSONL sink's state file do (:func:`read_position`).
:func:`decode_offsets` skips it. :class:`PositionHolder` is the file sinks' keeping of it
between their writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import orjson

from cdc.log.base import TopicPartition

#: The stored name of the consistent source position beside the offsets.
POSITION_FIELD: Final = "consistent_position"


def offset_field(topic: str, partition: int) -> str:
    """The stored name of a partition's offset."""
    return f"{topic}|{partition}"


def encode_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, int]:
    """The stored form of ``offsets``: the next offset by :func:`offset_field`."""
    return {offset_field(*tp): offset for tp, offset in offsets.items()}


def decode_offsets(
    stored: Mapping[Any, int | str | bytes],
) -> dict[TopicPartition, int]:
    """The offsets :func:`encode_offsets` stored (a Redis hash's fields and values are bytes)."""
    offsets: dict[TopicPartition, int] = {}
    for field, offset in stored.items():
        name = field.decode() if isinstance(field, bytes) else field
        if name == POSITION_FIELD:
            continue
        topic, _, partition = name.rpartition("|")
        offsets[TopicPartition(topic, int(partition))] = int(offset)
    return offsets


def read_position(stored: Mapping[str, Any] | None) -> str | None:
    """The position stored beside the offsets in ``stored`` (a JSON object), if any."""
    found = None if stored is None else stored.get(POSITION_FIELD)
    return found if isinstance(found, str) else None


def with_position(encoded: dict[str, Any], position: str | None) -> dict[str, Any]:
    """``encoded`` offsets with ``position`` beside them; as they are with no position, or no
    offsets (a position stands only beside the offsets of the data that reaches it)."""
    return encoded if position is None or not encoded else {**encoded, POSITION_FIELD: position}


class PositionHolder:
    """A file sink's consistent position: the one its file holds and the one handed for its
    next write (:class:`cdc.contracts.sink.PositionedSink`).

    The next write stores the handed one, else the stored one again: a write replaces the whole
    file, so a flush with no new position must carry the stored one over.
    """

    def __init__(self) -> None:
        self._stored: str | None = None
        self._held: str | None = None

    def load(self, stored: Mapping[str, Any] | None) -> None:
        """Take the position ``stored`` (the file's JSON object of offsets) holds as the stored
        one, and forget any handed one (it described writes the file does not hold)."""
        self._stored, self._held = read_position(stored), None

    def hold(self, position: str) -> None:
        """Keep ``position`` for the next write."""
        self._held = position

    def to_write(self, offsets: Mapping[TopicPartition, int]) -> str | None:
        """The position the next write stores beside ``offsets``: the held one, else the
        stored one; none without offsets (a position stands only beside the offsets of the data
        that reaches it)."""
        return (self._held or self._stored) if offsets else None

    def written(self, position: str | None) -> None:
        """The write of ``position`` (:meth:`to_write`'s) succeeded: it is the stored one now."""
        self._stored, self._held = position, None

    def failed(self) -> None:
        """The write failed: forget the handed position (a failed flush forgets it,
        :class:`cdc.contracts.sink.PositionedSink`), keep the stored one."""
        self._held = None

    def clear(self) -> None:
        """Forget both (a table read again from its start reaches no position)."""
        self._stored = self._held = None


def read_json(path: Path) -> Any:
    """The JSON stored in ``path`` by :func:`write_json`; ``None`` when there is no file.

    Raises:
        OSError: the file cannot be read.
    """
    if not path.exists():
        return None
    return orjson.loads(path.read_bytes())


def write_json(path: Path, data: Any, temp: Path) -> None:
    """Store ``data`` as ``path``'s JSON, atomically and durably (:func:`replace_file`)."""
    replace_file(path, orjson.dumps(data), temp)


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
