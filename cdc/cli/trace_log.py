"""``cdc trace``'s log side: a key's records (its versions) in its table's topic, and the dead
letters written for it.

Records of one key go to one partition (:mod:`cdc.log.partitioner`), so only that partition is
read. The embedded log looks the key up in its key index (``records_by_key``) where it has one;
otherwise (Kafka; a log in the middle of a bulk load; keys wrapped by ``schemas.enable``, whose
bytes hold the schema too) the partition is scanned from its start and each record's parsed key
compared. A compacted topic keeps only the versions compaction has not removed: a key's older
versions may be gone, which the report says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cdc.contracts.errors import LogError
from cdc.contracts.events import topic_name
from cdc.contracts.schema import dead_letter_topic
from cdc.envelope.encode import encode_key, record_pos
from cdc.log.base import Log, StoredRecord
from cdc.runtime.sink_task import payload_of

#: Records read at a time when a partition is scanned.
SCAN_RECORDS = 5000

RowsOf = Callable[[str, Any, Any], tuple[Any, Any]]


@dataclass(frozen=True)
class Version:
    """One record of the key: where it is in the log, its position and its row."""

    partition: int
    offset: int
    position: tuple[Any, Any] | None
    op: str | None  # None: a tombstone
    row: dict[str, Any] | None  # the after image; None for a delete or a tombstone
    commit_ts_ms: int | None
    appended_ms: int
    change_position: Any = None  # the change's own position in its source block, if it has one

    @property
    def removes(self) -> bool:
        """The version deletes the row (a delete, or a tombstone standing for one)."""
        return self.op in (None, "d")

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "position": None if self.position is None else list(self.position),
            "change_position": self.change_position,
            "op": self.op if self.op is not None else "tombstone",
            "commit_ts_ms": self.commit_ts_ms,
            "appended_ms": self.appended_ms,
            "row": self.row,
        }


def key_versions(
    log: Log, pipeline: Any, table: str, key: dict[str, Any], rows: RowsOf | None = None
) -> tuple[list[Version], list[int], str]:
    """The key's records in offset order, the partitions read, and how they were found."""
    schema, _, name = table.partition(".")
    topic = topic_name(pipeline.name, schema, name)
    wrapped = bool(getattr(pipeline.envelope, "schemas_enable", False))
    key_bytes = encode_key(key)
    try:
        ends = log.end_offsets(topic)
    except LogError:  # no topic yet: the table has had no record
        if topic in {t.name for t in log.topics()}:  # an unreachable log raises here too
            raise
        return [], [], "no topic yet"
    partitions = sorted(ends) if wrapped else [log.partition_for(topic, key_bytes)]
    by_key = getattr(log, "key_records", None)
    indexed = None if wrapped or by_key is None else by_key(topic, key_bytes)
    if indexed is not None:
        return [_version(r, rows) for r in indexed], partitions, "key index"
    found: list[StoredRecord] = []
    for partition in partitions:
        found.extend(r for r in _scan(log, topic, partition) if _same_key(r.key, key))
    return [_version(r, rows) for r in found], partitions, "partition scan"


def _scan(log: Log, topic: str, partition: int) -> Iterator[StoredRecord]:
    offset = 0
    while batch := log.read(topic, partition, offset, SCAN_RECORDS):
        yield from batch
        offset = batch[-1].offset + 1


def _same_key(stored: bytes | None, key: dict[str, Any]) -> bool:
    if stored is None:
        return False
    parsed = payload_of(stored)
    return isinstance(parsed, dict) and key_text(parsed) == key_text(key)


def key_text(key: dict[str, Any]) -> dict[str, str]:
    """A key compared by its values' text: ``42`` and ``"42"`` are one key (stores differ in
    how they give a key back; within one table the type is fixed)."""
    return {c: v if isinstance(v, str) else _json(v) for c, v in key.items()}


def _json(value: Any) -> str:
    import orjson

    return orjson.dumps(value).decode()


def _version(record: StoredRecord, rows: RowsOf | None) -> Version:
    value = None if record.value is None else payload_of(record.value)
    if rows is not None and value is not None:
        _, value = rows(record.topic, None, value)
    try:
        position: tuple[Any, Any] | None = record_pos(record.pos, value)
    except (KeyError, TypeError, ValueError):
        position = None
    if value is None:
        return Version(
            record.partition, record.offset, position, None, None, None, record.timestamp_ms
        )
    source = value.get("source") or {}
    op = value.get("op")
    after = value.get("after") if op != "d" else None
    return Version(
        record.partition,
        record.offset,
        position,
        op,
        after if isinstance(after, dict) else None,
        source.get("ts_ms"),
        record.timestamp_ms,
        source.get("lsn"),  # the change's own position, where the source block has one (PostgreSQL)
    )


def dead_letters(log: Log, pipeline: str, table: str, key: dict[str, Any]) -> list[dict[str, Any]]:
    """The dead letters of the key: ``{"origin", "offset", "reason", "ts_ms"}`` each.

    A dead letter's own key is unique (the topic is compacted, and none may hide another), so
    it can be on any partition: every partition of the dead-letter topic is read.
    """
    topic = dead_letter_topic(pipeline)
    if topic not in {t.name for t in log.topics()}:
        return []
    schema, _, name = table.partition(".")
    names = {table, topic_name(pipeline, schema, name)}
    found = []
    for partition in sorted(log.end_offsets(topic)):
        for record in _scan(log, topic, partition):
            letter = None if record.value is None else payload_of(record.value)
            if _is_letter_of(letter, names, key):
                assert isinstance(letter, dict)
                payload = letter.get("payload")
                offset = payload.get("offset") if isinstance(payload, dict) else None
                found.append(
                    {
                        "origin": letter.get("origin"),
                        "offset": offset,
                        "reason": letter.get("reason"),
                        "ts_ms": letter.get("ts_ms"),
                        "dead_letter_offset": record.offset,
                    }
                )
    return found


def _is_letter_of(letter: Any, names: set[str], key: dict[str, Any]) -> bool:
    if not isinstance(letter, dict) or letter.get("table") not in names:
        return False
    held = letter.get("key")
    return isinstance(held, dict) and key_text(held) == key_text(key)
