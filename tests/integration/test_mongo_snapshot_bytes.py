"""A MongoDB snapshot of 1 MB documents against a real server (mongo-java-server, or
``CDC_TEST_MONGO_URI``): its batches (each a commit and a resume point) are bounded by
``max_batch_bytes`` as well as ``snapshot_batch``, and a snapshot stopped part way resumes after
its last committed batch, every document read once, whole."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.events import Op
from tests.integration.mongo_kit import Harness, database, harness, scope

pytestmark = pytest.mark.timeout(180)

DOCS = 24
SIZE = 1_000_000  # characters of each document's text
PER_BATCH = 3  # 2MiB: two documents are 2 MB, the third crosses the bound


def _text(i: int) -> str:
    return f"{i:05d}" * (SIZE // 5)


def _polls(h: Harness, done: Any) -> list[int]:
    """Step until ``done()``: the changes each poll handed on (one snapshot batch each)."""
    polls: list[int] = []
    deadline = time.monotonic() + 120
    while not done():
        assert time.monotonic() < deadline, polls
        seen = h.step(timeout_s=1.0)
        if seen:
            polls.append(seen)
    return polls


def test_a_snapshot_of_1mb_documents_comes_in_batches_bounded_by_bytes_and_resumes(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        for first in range(0, DOCS, 4):  # a few at a time: a request is at most 48 MB
            db.big.insert_many([{"_id": i, "text": _text(i)} for i in range(first, first + 4)])
        table = f"{db.name}.big"
        options = {"stream_scope": scope(mongo_server), "max_batch_bytes": "2MiB"}
        with harness(mongo_server.uri, tmp_path, [table], snapshot="initial", **options) as h:
            h.open()
            # Without the byte bound: one batch of all 24 documents (24 MB).
            first = _polls(h, lambda: len(h.events) >= 2 * PER_BATCH)
            h.close()  # as after a crash: only committed batches count
            h.open()
            rest = _polls(h, lambda: "last_snapshot" in h.stored())
            stored = h.stored()
    assert first and max(first) <= PER_BATCH, first
    assert rest and max(rest) <= PER_BATCH, rest
    read = [e for e in h.events if e.op is Op.READ]
    assert [e.key["_id"] for e in read] == list(range(DOCS))  # each once, in order, over both
    assert all(e.after and e.after["text"] == _text(e.key["_id"]) for e in read)
    assert stored["last_snapshot"]["rows"] == {table: DOCS}
