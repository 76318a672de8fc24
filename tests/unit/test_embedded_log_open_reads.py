"""Opening an embedded log that is already at the current schema takes no write lock.

``cdc status``, ``cdc tail`` and the tests open a log a running pipeline writes to. Before, every
open ran the schema check inside a write transaction, so it queued behind the writer: under a
snapshot's back-to-back commits a poll could wait until the snapshot was over (a test that
killed ``cdc run`` "after two chunks" found the snapshot already finished).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded.store import DB_FILE


def test_an_open_while_another_connection_holds_the_write_lock_does_not_wait(
    tmp_path: Path,
) -> None:
    EmbeddedLog(tmp_path).close()  # create the schema
    writer = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # a writer in the middle of a commit
    try:
        # Without the fix the open waits out its busy timeout and fails with LogUnavailable.
        log = EmbeddedLog(tmp_path, busy_timeout_ms=100)
        try:
            assert log.source_offsets() == {}
        finally:
            log.close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
