"""Rows a re-snapshot window read are dropped when the stream changes their key inside the
window, whatever the envelope: the window's rows go out at its high watermark, after those
changes, so a stale row kept would overwrite the newer change in every sink.

Deterministic: the reader's ``before_high`` hook holds the first chunk after its read and before
its high watermark; the test commits its changes there, so the read surely missed them. A real
PostgreSQL, the real source task and a real embedded log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.snapshot_kit import Pipeline, execute, pipeline, table_state
from tests.integration.test_pg_resnapshot_ddl import WAIT_S, resnapshot, settled

ROWS = 300
ENVELOPES = {"plain": {}, "schemas": {"schemas.enable": True}}
#: The stream's changes as events (a caller reading them), or written as records (cdc run).
WRITES = {"events": False, "records": True}


@pytest.fixture(params=[(e, w) for e in sorted(ENVELOPES) for w in WRITES], ids="-".join)
def p(request: pytest.FixtureRequest, pg_db: str, tmp_path: Path) -> Iterator[Pipeline]:
    envelope: dict[str, Any] = ENVELOPES[request.param[0]]
    write_records = WRITES[request.param[1]]
    execute(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY, a text, b text, v int)",
        f"INSERT INTO t SELECT g, 'a' || g, 'b' || g, g FROM generate_series(1, {ROWS}) g",
    )
    with pipeline(
        pg_db,
        tmp_path / "log",
        ["public.t"],
        envelope=envelope,
        write_records=write_records,
        snapshot_chunk_rows=100,
    ) as running:
        running.start()
        running.wait(lambda: bool(running.sources) and running.sources[-1].streaming)
        running.wait(lambda: running.matches("public.t"))
        yield running


@pytest.mark.pgcore
def test_a_key_changed_after_the_window_read_keeps_its_change(p: Pipeline) -> None:
    held, ident = resnapshot(p, high=True)
    execute(
        p.dsn,
        "UPDATE t SET a = 'changed in the window' WHERE id = 5",  # the row encoder's path
        "UPDATE t SET v = -v WHERE id IN (6, 7)",
        "DELETE FROM t WHERE id = 8",
    )
    held.release()
    p.wait(lambda: settled(p, ident), WAIT_S)
    assert p.snapshot_state().get("failed") == []
    state = p.topic_state("public.t")
    expected = table_state(p.dsn, "public.t")
    assert state[5] == expected[5] and state[5]["a"] == "changed in the window"
    assert (state[6]["v"], state[7]["v"], 8 in state) == (-6, -7, False)
    assert state == expected
