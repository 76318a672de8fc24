"""Snapshot progress stored per table in both logs (a real embedded log, a real Kafka broker):
each commit stores only the tables it changed, a ``None`` deletes a table's key, and the old
single-key form a log already holds is rewritten per table by the next commit."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc.config.models import KafkaLogConfig
from cdc.contracts import snapshot_offsets as so
from cdc.log.base import Log
from cdc.log.embedded import EmbeddedLog
from cdc.log.kafka import KafkaLog
from snapshots.chunks import key_chunks
from snapshots.state import SnapshotState


@pytest.fixture(params=["embedded", "kafka"])
def open_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Log]]:
    """Opens the same log again each time it is called (a restarted pipeline's)."""
    opened: list[Log] = []
    pipeline = f"offsets_{uuid.uuid4().hex[:10]}"

    def factory() -> Log:
        log: Log
        if request.param == "embedded":
            log = EmbeddedLog(tmp_path / "log")
        else:
            bootstrap = request.getfixturevalue("kafka_server").bootstrap_servers
            config = KafkaLogConfig(type="kafka", bootstrap_servers=bootstrap)
            log = KafkaLog(pipeline, config)
        log.claim_source()
        opened.append(log)
        return log

    yield factory
    for log in opened:
        log.close()


def commit(log: Log, offsets: dict[str, Any]) -> None:
    tx = log.begin()
    tx.store_offsets(offsets)
    tx.commit()


def test_a_table_key_is_stored_alone_and_deleted_by_none(open_log: Callable[[], Log]) -> None:
    log = open_log()
    state = SnapshotState()
    state.begin_initial("s1", 10)
    for name in ("public.a", "public.b", "public.c"):
        state.plan_table(name, "initial", "keyset", key_chunks([("5",)]), request="s1")
    commit(log, {"postgres": {"lsn": 10}, **state.offsets(progress=True)})
    state.chunk_done("public.b", 0, 5)
    only_b = state.offsets()
    assert set(only_b) == {so.table_key("public.b")}
    commit(log, only_b)
    state.forget(["public.c"])
    gone = state.offsets()
    assert gone[so.table_key("public.c")] is None
    commit(log, gone)

    stored = open_log().source_offsets()  # as a restarted pipeline reads them
    assert so.table_key("public.c") not in stored
    again = SnapshotState.from_offsets(stored)
    unfinished = {t: [c.index for c in cs] for t, cs in again.unfinished().items()}
    assert unfinished == {"public.a": [0, 1], "public.b": [1]}
    assert stored["postgres"] == {"lsn": 10}


def test_the_old_form_is_rewritten_per_table_in_one_commit(open_log: Callable[[], Log]) -> None:
    log = open_log()
    old = SnapshotState()
    old.begin_initial("s1", 10)
    for name in ("public.a", "public.b"):
        old.plan_table(name, "initial", "keyset", key_chunks([("5",)]), request="s1")
    old.chunk_done("public.a", 1, 3)
    commit(log, {"postgres": {"lsn": 10}, so.RUN_KEY: old.to_json()})  # as stored before

    state = SnapshotState.from_offsets(log.source_offsets())
    state.chunk_done("public.b", 0, 4)
    commit(log, state.offsets())

    stored = open_log().source_offsets()
    assert "tables" not in stored[so.RUN_KEY]
    assert {k for k in stored if k.startswith(so.TABLE_PREFIX)} == {
        so.table_key("public.a"),
        so.table_key("public.b"),
    }
    again = SnapshotState.from_offsets(stored)
    unfinished = {t: [c.index for c in cs] for t, cs in again.unfinished().items()}
    assert unfinished == {"public.a": [0], "public.b": [1]}
