"""Schema changes that rewrite rows PostgreSQL never logs (a default, a rename, a drop, a type
change) are re-snapshotted while streaming, so the topics converge on the table; changes that
leave rows alone are not. The snapshotting source runs through the real source task into a real
embedded log, against a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cdc.runtime.schemas import SchemaCatalog
from tests.integration.snapshot_kit import PIPELINE, Pipeline, execute, pipeline, table_state

ROWS = 300


@pytest.fixture
def p(pg_db: str, tmp_path: Path) -> Iterator[Pipeline]:
    execute(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY, a text, v varchar(10))",
        f"INSERT INTO t SELECT g, 'a' || g, 'v' FROM generate_series(1, {ROWS}) g",
    )
    with pipeline(pg_db, tmp_path / "log", ["public.t"], snapshot_chunk_rows=100) as running:
        running.start()
        running.wait(lambda: bool(running.sources) and running.sources[-1].streaming)
        running.wait(lambda: running.matches("public.t"))
        yield running


def change(p: Pipeline, ddl: str, touch_id: int) -> None:
    """Run ``ddl``, then change one row: pgoutput sends the new Relation before that change."""
    execute(p.dsn, ddl, f"UPDATE t SET id = id WHERE id = {touch_id}")


def decisions(logs: Sequence[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == "schema.changed"]


def requests(p: Pipeline) -> int:
    return len(p.snapshot_state().get("finished") or [])


@pytest.mark.pgcore
def test_a_default_a_rename_a_type_change_and_a_drop_converge(p: Pipeline) -> None:
    done = requests(p)
    with capture_logs() as logs:
        change(p, "ALTER TABLE t ADD COLUMN c int DEFAULT 7", 1)
        # Without a re-snapshot only row 1 gets c = 7: the other 299 never change.
        p.wait(lambda: p.matches("public.t"))
        assert set(p.topic_state("public.t")[2]) == {"id", "a", "v", "c"}

        change(p, "ALTER TABLE t RENAME COLUMN a TO b", 2)
        p.wait(lambda: p.matches("public.t"))
        assert all("a" not in row and row["b"] == f"a{i}" for i, row in topic(p).items())

        change(p, "ALTER TABLE t ALTER COLUMN c TYPE text", 3)
        p.wait(lambda: p.matches("public.t"))
        assert topic(p)[4]["c"] == "7"  # was the number 7

        change(p, "ALTER TABLE t DROP COLUMN b", 4)
        p.wait(lambda: p.matches("public.t"))
        p.wait(lambda: requests(p) == done + 4)
    found = decisions(logs)
    assert [e["change"] for e in found] == [
        {"added": ["c"]},
        {"renamed": {"a": "b"}},
        {"retyped": {"c": "integer -> text"}},
        {"dropped": ["b"]},
    ]
    assert all(e["resnapshot"] for e in found)
    assert "'c' was added with a default" in found[0]["reason"]
    requested = [e for e in logs if e["event"] == "snapshot.requested"]
    assert [e["table"] for e in requested] == ["public.t"] * 4


def test_changes_that_leave_rows_alone_are_not_resnapshotted(p: Pipeline) -> None:
    done = requests(p)
    with capture_logs() as logs:
        change(p, "ALTER TABLE t ADD COLUMN d int", 1)
        change(p, "ALTER TABLE t ALTER COLUMN v TYPE varchar(20)", 2)
        change(p, "ALTER TABLE t ALTER COLUMN v SET NOT NULL", 3)
        p.wait(lambda: len(decisions(logs)) == 2 and topic(p)[3] == table_state(p.dsn, "t")[3])
    # The rows not touched since lack d, which reads as NULL (what cdc verify compares), and
    # hold nothing stale.
    table = table_state(p.dsn, "t")
    assert {k: {"d": None, **row} for k, row in topic(p).items()} == table
    assert [(e["change"], e["resnapshot"]) for e in decisions(logs)] == [
        ({"added": ["d"]}, False),
        ({"retyped": {"v": "character varying(10) -> character varying(20)"}}, False),
    ]
    assert requests(p) == done and not p.snapshot_state().get("requests")


def test_a_rename_keeps_the_column_id_and_a_drop_and_add_does_not(p: Pipeline) -> None:
    change(p, "ALTER TABLE t RENAME COLUMN v TO w", 1)
    p.wait(lambda: "w" in names(p))
    ids = {c.name: c.id for c in published(p).columns}
    assert ids == {"id": 1, "a": 2, "w": 3}
    # The same Relation message as a rename of w to x (id, a, x: text, varchar): the id differs.
    change(p, "ALTER TABLE t DROP COLUMN w, ADD COLUMN x varchar(10)", 1)
    p.wait(lambda: "x" in names(p))
    assert {c.name: c.id for c in published(p).columns} == {"id": 1, "a": 2, "x": 4}
    p.wait(lambda: p.matches("public.t"))


def test_a_change_made_while_stopped_is_caught_at_the_next_start(p: Pipeline) -> None:
    p.stop()
    execute(
        p.dsn,
        "UPDATE t SET a = 'before' WHERE id = 1",  # replayed in the old shape first
        "ALTER TABLE t RENAME COLUMN a TO b",
        "UPDATE t SET b = 'after' WHERE id = 2",
    )
    with capture_logs() as logs:
        p.start()
        p.wait(lambda: p.matches("public.t"))
    assert [e["change"] for e in decisions(logs)] == [{"renamed": {"a": "b"}}]
    assert topic(p)[1]["b"] == "before" and "a" not in topic(p)[3]


def topic(p: Pipeline) -> dict[Any, dict[str, Any]]:
    return p.topic_state("public.t")


def published(p: Pipeline) -> Any:
    schema = SchemaCatalog(p.log, PIPELINE, wait_s=0).get("public", "t")
    assert schema is not None
    return schema


def names(p: Pipeline) -> list[str]:
    return [c.name for c in published(p).columns]


def test_snapshot_never_asks_for_no_resnapshot_and_says_how_to(pg_db: str, tmp_path: Path) -> None:
    execute(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY, a text)",
        "INSERT INTO t SELECT g, 'a' FROM generate_series(1, 10) g",
    )
    with pipeline(pg_db, tmp_path / "log", ["public.t"], snapshot="never") as p:
        p.start()
        p.wait(lambda: bool(p.sources) and p.sources[-1].streaming)
        execute(pg_db, "UPDATE t SET a = 'b' WHERE id = 1")  # the stream learns the shape
        p.wait(lambda: bool(topic(p)))
        with capture_logs() as logs:
            change(p, "ALTER TABLE t ADD COLUMN c int DEFAULT 1", 2)
            p.wait(lambda: any(e["event"] == "snapshot.not_requested" for e in logs))
        [skipped] = [e for e in logs if e["event"] == "snapshot.not_requested"]
        assert "snapshot: never" in skipped["reason"] and "cdc snapshot" in skipped["fix"]
        assert not p.snapshot_state().get("requests") and not p.snapshot_state().get("tables")
        p.wait(lambda: 2 in topic(p))
        assert sorted(topic(p)) == [1, 2]  # only the changed rows, as snapshot: never streams
