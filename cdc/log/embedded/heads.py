"""Value heads: the Connect schema a ``schemas.enable`` value repeats, stored once per log.

Such a value is ``{"schema":<S>,"payload":<P>}``: the head up to ``<P>`` is the same few KB for
every record of a table version, the payload a few hundred bytes. The log stores each distinct
head once in ``value_heads`` and a record only ``<P>`` and the head's id (``records.head_id``),
so it writes ~7x fewer bytes a record and SQLite spends that much less CPU on them. Readers get
the value back byte for byte: head + payload + ``}``. A value that is not wrapped is stored
whole, with no head.

The ids are the table's row ids. A head is inserted in the writing transaction, so it commits
with the first records that use it, or not at all; only committed heads enter the shared cache.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping
from typing import Any, Final

#: The start of a wrapped value, and the text its head ends with. The first ``,"payload":`` is
#: the end of the head: a Connect schema has no ``payload`` key, and a quote inside a JSON
#: string is escaped.
WRAPPED: Final = b'{"schema":{'
PAYLOAD: Final = b',"payload":'
_CLOSE: Final = b"}"

_INSERT = "INSERT OR IGNORE INTO value_heads (head) VALUES (?)"
_ID = "SELECT id FROM value_heads WHERE head = ?"
_HEAD = "SELECT head FROM value_heads WHERE id = ?"

#: ``(head, id)`` pairs, as the appender takes them.
Known = list[tuple[bytes, int]]


def head_of(value: bytes) -> bytes | None:
    """The head of a wrapped value (through ``,"payload":``), or ``None``."""
    if not value.startswith(WRAPPED) or not value.endswith(_CLOSE):
        return None
    at = value.find(PAYLOAD)
    return None if at < 0 else value[: at + len(PAYLOAD)]


def strip(value: Any, known: Known) -> tuple[Any, int | None]:
    """``value`` as stored: without its head when it starts with one of ``known``, with that
    head's id; else itself, with none (anything but bytes too: SQLite's bind refuses it).
    The native appender does the same."""
    if not isinstance(value, bytes) or not value.startswith(WRAPPED) or not value.endswith(_CLOSE):
        return value, None
    for head, head_id in known:
        if len(value) > len(head) and value.startswith(head):
            return value[len(head) : -1], head_id
    return value, None


class ValueHeads:
    """The heads a log's connections have seen committed: by id for readers, and per topic
    for writers (a head names its topic, so a batch is matched against its topic's few table
    versions only, however many topics the log has)."""

    def __init__(self) -> None:
        self._by_id: dict[int, bytes] = {}
        self._by_topic: dict[int, Known] = {}
        self._lock = threading.Lock()

    def known(self, topic_id: int) -> Known:
        """The committed heads of a topic that this process wrote or stored (a list that is
        replaced, never changed, when one is added). A head written by an earlier run is
        learnt again the first time a record uses it (:meth:`store` finds its id)."""
        return self._by_topic.get(topic_id, [])

    def store(self, conn: sqlite3.Connection, head: bytes) -> int:
        """The id of ``head``, inserted in ``conn``'s open transaction if it is new there."""
        conn.execute(_INSERT, (head,))
        head_id: int = conn.execute(_ID, (head,)).fetchone()[0]
        return head_id

    def remember(self, heads: Mapping[bytes, int], topic_id: int | None = None) -> None:
        """Add heads whose transaction committed (of ``topic_id``, for its writers)."""
        if not heads:
            return
        with self._lock:
            self._by_id.update({i: h for h, i in heads.items()})
            if topic_id is not None:
                known = dict(self._by_topic.get(topic_id, []))
                known.update(heads)
                self._by_topic[topic_id] = list(known.items())

    def whole(self, conn: sqlite3.Connection, head_id: int, payload: bytes) -> bytes:
        """The value stored as ``payload`` under head ``head_id``."""
        head = self._by_id.get(head_id)
        if head is None:  # written by another process, or before this one opened the log
            row = conn.execute(_HEAD, (head_id,)).fetchone()
            if row is None:
                raise sqlite3.DatabaseError(f"value head {head_id} is missing from value_heads")
            head = bytes(row[0])
            self.remember({head: head_id})
        return b"%b%b}" % (head, payload)
