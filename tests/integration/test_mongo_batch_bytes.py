"""The MongoDB source's polls bounded by ``max_batch_bytes`` against a real server
(mongo-java-server, or ``CDC_TEST_MONGO_URI``): large documents come a few a poll, every one
once and in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.mongo_kit import database, harness, scope

pytestmark = pytest.mark.timeout(120)

DOCS = 20
SIZE = 40_000  # bytes of each document's text: two fit the bound, the third crosses it


def test_large_documents_come_in_polls_bounded_by_bytes(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.create_collection("docs")
        table = f"{db.name}.docs"
        options = {"stream_scope": scope(mongo_server), "max_batch_bytes": "64KiB"}
        with harness(mongo_server.uri, tmp_path, [table], **options) as h:
            h.open()
            db.docs.insert_many([{"_id": i, "text": f"{i:05d}" * (SIZE // 5)} for i in range(DOCS)])
            polls = []
            while sum(polls) < DOCS:
                seen = h.step(timeout_s=2)
                if seen:
                    polls.append(seen)
            events = h.events
    assert polls and max(polls) <= 2, polls
    assert [e.key["_id"] for e in events] == list(range(DOCS))
    assert all(
        e.after and e.after["text"] == f"{i:05d}" * (SIZE // 5) for i, e in enumerate(events)
    )
