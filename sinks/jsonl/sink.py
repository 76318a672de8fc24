"""JSON-lines files, one per topic, written exactly once.

With ``unwrap`` each line's ``value`` is the change's row state instead of its envelope
(Debezium's ``ExtractNewRecordState``, :mod:`cdc.transforms.unwrap`); a record unwrap leaves
out writes no line, and its offset is stored all the same.

Each flush fsyncs the files, then atomically replaces a small state file holding the next offset
per partition and each file's length. On open, every file is cut back to its recorded length, so
whatever was written after the last flush (and will be read again) disappears first: replays
never duplicate a line.

An open sink holds an exclusive ``flock`` on ``_lock`` in its directory until it is closed, and
an open that finds it held is unavailable (retried): on Kafka each worker writes the partitions
it owns into its own directory, and two workers given one directory (or a worker paused past its
session and the one its partitions moved to) would otherwise interleave their appends and
overwrite each other's state. Like DuckDB's file lock it holds between processes of one host
(and not on NFS).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from cdc.contracts.errors import SinkFatal, SinkUnavailable
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.log.base import TopicPartition
from cdc.transforms.unwrap import unwrap_records
from sinks.jsonl.config import JsonlSinkConfig
from sinks.offsets import (
    PositionHolder,
    decode_offsets,
    encode_offsets,
    read_json,
    with_position,
    write_json,
)

STATE_FILE = "_state.json"
LOCK_FILE = "_lock"


class JsonlSink:
    """Appends ``{"topic", "partition", "offset", "key", "value"}`` lines."""

    def __init__(self, config: JsonlSinkConfig, context: SinkContext) -> None:
        self._dir = Path(config.path)
        self._unwrap = config.unwrap
        self._files: dict[str, IO[bytes]] = {}
        self._offsets: dict[TopicPartition, int] = {}
        self._lengths: dict[str, int] = {}
        self._lock: int | None = None
        # The source position the files are consistent up to, kept with the offsets.
        self._position = PositionHolder()

    def open(self) -> None:
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            self._take_lock()
            state = self._read_state()
        except OSError as exc:
            self._let_go()
            raise SinkFatal(f"cannot use {self._dir}: {exc.strerror}") from exc
        self._offsets = decode_offsets(state.get("offsets", {}))
        self._position.load(state.get("offsets"))
        self._lengths = {name: int(n) for name, n in state.get("files", {}).items()}
        for file in self._dir.glob("*.jsonl"):
            # Cut off what was written after the last flush: it will be read again.
            with file.open("r+b") as handle:
                handle.truncate(self._lengths.get(file.name, 0))

    def stored_offsets(self) -> Mapping[TopicPartition, int]:
        return dict(self._offsets)

    def set_consistent_position(self, position: str) -> None:
        """Store ``position`` in the state file the next flush writes, with the offsets
        (:class:`cdc.contracts.sink.PositionedSink`)."""
        self._position.hold(position)

    def write(self, records: Sequence[SinkRecord]) -> None:
        written = records if self._unwrap is None else unwrap_records(records, self._unwrap)
        for record in written:
            line = {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "key": record.key,
                "value": record.value,
            }
            self._file(record.topic).write(orjson.dumps(line) + b"\n")
        # Every record given counts as applied, the ones unwrap leaves out too (a tombstone,
        # a truncate): else a batch ending in them would be read again after every restart.
        for record in records:
            self._offsets[record.tp] = record.offset + 1

    def flush(self) -> None:
        for name, handle in self._files.items():
            handle.flush()
            os.fsync(handle.fileno())
            self._lengths[name] = handle.tell()
        position = self._position.to_write(self._offsets)
        offsets = with_position(encode_offsets(self._offsets), position)
        state = {"offsets": offsets, "files": self._lengths}
        try:
            write_json(self._dir / STATE_FILE, state, self._dir / (STATE_FILE + ".tmp"))
        except BaseException:
            self._position.failed()
            raise
        self._position.written(position)

    def close(self) -> None:
        try:
            for handle in self._files.values():
                handle.close()
            self._files.clear()
        finally:
            self._let_go()  # last: the files are closed before another writer may open them

    def _take_lock(self) -> None:
        """Hold ``_lock`` (the fence between writers: see the module's docstring).

        Raises:
            SinkUnavailable: another process (or open sink) holds it.
        """
        if self._lock is not None:
            return
        fd = os.open(self._dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SinkUnavailable(f"{self._dir} is locked by another writer") from None
        except BaseException:
            os.close(fd)
            raise
        self._lock = fd

    def _let_go(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            os.close(lock)  # closing the descriptor releases the flock

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        """Empty the files of ``partitions``' topics and store offset 0 for each partition.

        The state file records the new lengths and offsets together; a crash before it is
        replaced leaves the old state, and the next open cuts the files back to it anyway.
        """
        try:
            for topic in {tp.topic for tp in partitions}:
                name = f"{topic}.jsonl"
                handle = self._files.pop(name, None)
                if handle is not None:
                    handle.close()
                with (self._dir / name).open("wb"):
                    pass
                self._lengths[name] = 0
            self._offsets.update(dict.fromkeys(partitions, 0))
            self._position.clear()  # read again from the start: no position held
            self.flush()
        except OSError as exc:
            raise SinkFatal(f"cannot reset {table[0]}.{table[1]} in {self._dir}: {exc}") from exc

    def _file(self, topic: str) -> IO[bytes]:
        name = f"{topic}.jsonl"
        handle = self._files.get(name)
        if handle is None:
            handle = (self._dir / name).open("ab")
            self._files[name] = handle
        return handle

    def _read_state(self) -> dict[str, Any]:
        state: dict[str, Any] | None = read_json(self._dir / STATE_FILE)
        return state or {}
