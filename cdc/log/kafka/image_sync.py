"""Key look-ups on Kafka for the source: a local latest-image store kept exactly as far as the
log's committed records (:meth:`cdc.log.base.Log.keep_latest`, ``latest_value``).

The source declares the topics and fields it will look up (the PostgreSQL source: the
TOAST-able columns of each table). The store (:class:`~cdc.log.kafka.images.ImageStore`,
SQLite in the pipeline's state directory) then keeps, per key, those fields of the latest
record, from two feeds: every record the source's transactions append, and, when the store lacks
a topic or cannot be trusted, the topic itself read ``read_committed`` to its end (a *restore*).

Why the store is never ahead of the log, nor behind it unnoticed:

- A source transaction's images are written in one SQLite transaction that is open as long as
  the Kafka transaction: look-ups on the source thread see them (as on the embedded log), and
  they become durable only after Kafka committed. An aborted Kafka transaction rolls them back;
  a SIGKILL before the Kafka commit leaves an unfinished SQLite transaction, which SQLite undoes
  at the next open. So nothing of an aborted transaction survives in the store.
- Each Kafka transaction of the source writes a fresh *commit mark* to the offsets topic
  (``__latest_images``), and the store commits that mark with a digest of the source offsets as
  of that commit. At every session the source reads the offsets (``read_committed``, after
  fencing any older producer); the store is used only if its mark and digest equal the log's.
  A SIGKILL between the Kafka commit and the store's, a commit whose outcome was unknown, a lost
  or deleted store, or offsets written without a mark (by an older version) all show as a
  difference: the store is then emptied and every declared topic restored.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

from cdc.contracts.errors import LogUnavailable
from cdc.log.base import Record, StoredRecord
from cdc.log.kafka.images import FILE_NAME, ImageStore, fingerprint
from cdc.log.kafka.messages import RecordsCallback
from cdc.log.offsets import stored_after
from cdc.support.logging import get_logger

#: The offsets-topic key of the commit mark (left out of what ``source_offsets`` returns).
MARK_KEY = "__latest_images"
#: Records per read while restoring: images can be large, and a read holds its batch.
RESTORE_BATCH = 500

_logger = get_logger(component="kafka_log")


class ImageLog(Protocol):
    """What the latest images read of their Kafka log (:class:`~cdc.log.kafka.log.KafkaLog`):
    its source offsets, and the records committed to a topic for a restore."""

    def source_offsets(self) -> dict[str, Any]: ...

    def scan_committed(self, topic: str, batch: int, apply: RecordsCallback) -> None: ...


class SourceImages:
    """The source thread's latest images (see the module docstring).

    Args:
        log: the Kafka log (restores read its topics).
        directory: the pipeline's state directory; the store is ``FILE_NAME`` inside it.
    """

    def __init__(self, log: ImageLog, directory: Path) -> None:
        self._log = log
        self.path = directory / FILE_NAME
        self._store: ImageStore | None = None
        self._fields: dict[str, list[str]] = {}
        # The log's (mark, source offsets) as last read or committed by this process.
        self._log_state: tuple[str | None, dict[str, Any]] | None = None
        self._valid = False
        self._in_log_tx = False

    @property
    def active(self) -> bool:
        """Topics are declared: the source's transactions feed the store and write marks."""
        return bool(self._fields) and self._store is not None

    # -- what the log calls --------------------------------------------------------------------

    def offsets_read(self, mark: str | None, offsets: Mapping[str, Any]) -> None:
        """The source read the stored offsets: check the store against them before its next use."""
        self._log_state = (mark, dict(offsets))
        self._valid = False

    def declare(self, fields: Mapping[str, Sequence[str]]) -> None:
        """Keep ``fields`` of these topics (the complete set; other topics are forgotten)."""
        self._fields = {topic: list(names) for topic, names in fields.items() if names}
        if not self._fields and self._store is None and not self.path.exists():
            return
        self._guarded(self._ensure_valid)
        self._guarded(self._reconcile)

    def lookup(self, topic: str, key: bytes) -> bytes | None:
        """``{"after": {kept fields}}`` of the key's latest record, or ``None``.

        Raises:
            NotImplementedError: ``topic`` is not declared.
        """
        if topic not in self._fields:
            raise NotImplementedError(f"the Kafka log keeps no latest images of {topic!r}")
        self._guarded(self._ensure_valid)
        assert self._store is not None
        image = self._guarded(lambda: self._open().get(topic, key))
        return None if image is None else b'{"after":%b}' % image

    def began(self) -> None:
        """A source transaction began: its images join one store transaction."""
        self._guarded(self._ensure_valid)
        self._in_log_tx = True

    def appended(self, records: Sequence[Record]) -> None:
        """The transaction produced ``records``."""
        self._guarded(lambda: self._open().apply(records, self._fields))

    def new_mark(self) -> str:
        """A mark for the transaction about to commit."""
        return uuid.uuid4().hex

    def committed(self, mark: str, offsets: Mapping[str, Any]) -> None:
        """Kafka committed the transaction with ``mark`` and ``offsets``: commit its images.

        Raises:
            LogUnavailable: the store could not commit; it is rebuilt at the next session.
        """
        self._in_log_tx = False
        assert self._log_state is not None
        merged = stored_after(self._log_state[1], offsets)
        self._log_state = (mark, merged)
        self._guarded(lambda: self._open().commit(mark, fingerprint(merged)))

    def rolled_back(self) -> None:
        """The transaction was aborted, or its commit failed: drop its images."""
        self._in_log_tx = False
        self._valid = False
        self._log_state = None  # a failed commit may have committed: ask the log again
        if self._store is not None:
            with contextlib.suppress(sqlite3.Error):
                self._store.rollback()

    def close(self) -> None:
        """Close the store (an open transaction is rolled back)."""
        store, self._store = self._store, None
        if store is not None:
            with contextlib.suppress(sqlite3.Error):
                store.close()

    # -- internals -----------------------------------------------------------------------------

    def _open(self) -> ImageStore:
        if self._store is None:
            try:
                self._store = ImageStore(self.path)
            except sqlite3.DatabaseError as exc:
                # Only a cache of the topics: a damaged one is rebuilt from them.
                _logger.warning("images.store_replaced", path=str(self.path), error=str(exc))
                for suffix in ("", "-wal", "-shm"):
                    self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
                self._store = ImageStore(self.path)
        return self._store

    def _ensure_valid(self) -> None:
        if self._valid:
            return
        store = self._open()
        store.rollback()  # nothing of an earlier session's transaction may stay
        if self._log_state is None:
            self._log.source_offsets()  # calls offsets_read
        assert self._log_state is not None
        mark, offsets = self._log_state
        digest = fingerprint(offsets)
        stored = store.mark()
        if stored != (mark, digest):
            self._reset(store, stored == (None, None), mark, digest)
        self._valid = True
        self._reconcile()

    def _reset(self, store: ImageStore, new: bool, mark: str | None, digest: str) -> None:
        """Empty the store, at the log's mark: the declared topics are then restored."""
        if new:
            _logger.info("images.reset", path=str(self.path), reason="a new store")
        else:
            # Expected after a crash between the Kafka commit and the store's, or a commit
            # whose outcome was unknown: nothing is lost, the topics have it all.
            _logger.warning(
                "images.reset",
                path=str(self.path),
                reason="the store is not at the log's last commit: rebuilt from the topics",
            )
        store.clear()
        store.commit(mark, digest)

    def _reconcile(self) -> None:
        """Forget topics no longer declared, restore declared ones the store lacks."""
        store = self._open()
        stored = store.topics()
        for topic in stored.keys() - self._fields.keys():
            store.forget(topic)
        for topic, fields in self._fields.items():
            if topic not in stored and self._in_log_tx:
                # A table's first TOAST-able column, seen in a Relation message mid-transaction:
                # its records so far hold no TOASTed value a later change could leave unchanged,
                # so it starts empty. A restore here would read the whole topic inside the open
                # Kafka transaction, stalling the stream (and risking its timeout).
                store.set_fields(topic, fields)
                _logger.info("images.topic_added", topic=topic, fields=fields)
            elif topic not in stored:
                self._restore(store, topic, fields)
            elif stored[topic] != fields:
                # A column became TOAST-able (or stopped): records before the change hold no
                # TOASTed value of it that a later change could leave unchanged.
                store.set_fields(topic, fields)
        if store.in_transaction and not self._in_log_tx:
            assert self._log_state is not None
            store.commit(self._log_state[0], fingerprint(self._log_state[1]))

    def _restore(self, store: ImageStore, topic: str, fields: list[str]) -> None:
        started = time.monotonic()
        store.forget(topic)
        store.set_fields(topic, fields)
        applied = [0]

        def apply(records: list[StoredRecord]) -> None:
            applied[0] += store.apply(records, {topic: fields})

        self._log.scan_committed(topic, RESTORE_BATCH, apply)
        _logger.info(
            "images.restored",
            topic=topic,
            records=applied[0],
            keys=store.count(topic),
            seconds=round(time.monotonic() - started, 3),
        )

    def _guarded(self, call: Any) -> Any:
        try:
            return call()
        except sqlite3.Error as exc:
            self.rolled_back()
            raise LogUnavailable(
                f"kafka log: the latest-image store {self.path} failed ({exc}); it is checked "
                "against the log and rebuilt from the topics if needed at the next session"
            ) from exc


def split_mark(offsets: dict[str, Any]) -> str | None:
    """Remove the commit mark from offsets read from the log; return it."""
    entry = offsets.pop(MARK_KEY, None)
    mark = entry.get("mark") if isinstance(entry, dict) else None
    return mark if isinstance(mark, str) else None


def mark_value(mark: str) -> bytes:
    """The offsets-topic value of a commit mark."""
    return orjson.dumps({"mark": mark})
