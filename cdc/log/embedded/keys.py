"""A key's records in the embedded log, through its key index (``records_by_key``), for
``cdc trace``: a read, so a log whose index a bulk load dropped is not indexed here (the caller
scans the partition instead)."""

from __future__ import annotations

import sqlite3

from cdc.log.base import StoredRecord
from cdc.log.embedded.shared import LogState, TopicCatalog
from cdc.log.embedded.store import KEY_INDEX_NAME, stored_records, translated
from cdc.log.partitioner import partition_for

_BY_KEY = (
    "SELECT offset, key, value, ts_ms, head_id, pos, frame_id FROM records"
    f" INDEXED BY {KEY_INDEX_NAME} WHERE topic_id = ? AND partition = ? AND key = ? ORDER BY offset"
)
_HAS_INDEX = "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?"


def key_records(
    conn: sqlite3.Connection, catalog: TopicCatalog, state: LogState, topic: str, key: bytes
) -> list[StoredRecord] | None:
    """Every record of ``key`` in ``topic``, in offset order; ``None`` when the log has no key
    index to look it up in (the topic missing: an empty list)."""
    meta = catalog.lookup(conn, topic)
    if meta is None:
        return []
    partition = partition_for(key, meta.partitions)
    with translated("looking a key's records up"), state.reading(conn) as whole:
        if conn.execute(_HAS_INDEX, (KEY_INDEX_NAME,)).fetchone() is None:
            return None
        rows = conn.execute(_BY_KEY, (meta.id, partition, key)).fetchall()
        return stored_records(topic, partition, rows, whole)
