"""A renamed masked or left-out column keeps its mask or exclusion, on a real PostgreSQL.

Filters name columns, PostgreSQL tracks them by ``attnum``: before the fix ``RENAME COLUMN ssn
TO ssn2`` sent every row's raw value through the re-snapshot the rename triggers (and every later
change through the stream). What a user relies on:

* a rename while the pipeline runs: the column keeps its mask (or stays out) under its new
  name, in the stream and in the re-snapshot, with a ``filter.column_renamed`` warning that says
  to rename it in the YAML; no raw value reaches a byte of the log;
* the next start with the YAML still naming the old column refuses to start, saying so, before
  anything is read; a masked column renamed while the pipeline was stopped and a new column
  given its old name are both masked;
* a column named like a masked one only by case is reported at start.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cdc.contracts.errors import SourceMisconfigured
from tests.integration.snapshot_kit import Pipeline, execute, pipeline

RAW = (b"SSN-RAW-", b"PW-RAW-")
USERS: dict[str, Any] = {
    "name": "public.users",
    "columns": {"exclude": ["password_hash"]},
    "mask": {"ssn": "redact"},
}
MASKED: dict[str, Any] = {
    "name": "public.users",
    "mask": {"ssn": "redact", "password_hash": "hash"},
}
MASK_KEY = "rename-test-key-0123456789"


def log_bytes(log_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(log_dir.rglob("*")) if p.is_file())


def no_raw(log_dir: Path) -> None:
    written = log_bytes(log_dir)
    for raw in RAW:
        assert raw not in written, f"{raw!r} in the log"


@pytest.fixture
def users(pg_db: str) -> str:
    execute(
        pg_db,
        "CREATE TABLE users (id int PRIMARY KEY, name text, ssn text, password_hash text)",
        "INSERT INTO users SELECT g, 'n' || g, 'SSN-RAW-' || g, 'PW-RAW-' || g"
        " FROM generate_series(1, 30) g",
    )
    return pg_db


def started(p: Pipeline) -> None:
    p.start()
    p.wait(lambda: bool(p.sources) and p.sources[-1].streaming)
    p.wait(lambda: len(p.topic_state("public.users")) == 30)


@contextmanager
def stopped_after_publishing(db: str, log_dir: Path, table: dict[str, Any]) -> Iterator[Pipeline]:
    """A pipeline that snapshotted ``users``, streamed an update of row 2 and stopped: what
    happens to the table next is behind the stream."""
    with pipeline(db, log_dir, [table], snapshot="initial", mask_key=MASK_KEY) as p:
        started(p)
        execute(db, "UPDATE users SET name = 'published' WHERE id = 2")
        p.wait(lambda: p.topic_state("public.users")[2]["name"] == "published")
        p.stop()
        yield p


def renamed_everywhere(p: Pipeline, rows: int) -> bool:
    state = p.topic_state("public.users")
    return len(state) == rows and all("ssn2" in row for row in state.values())


@pytest.mark.pgcore
def test_a_rename_while_running_keeps_the_mask_and_the_exclusion(
    users: str, tmp_path: Path
) -> None:
    log_dir = tmp_path / "log"
    with pipeline(users, log_dir, [USERS], snapshot="initial", snapshot_chunk_rows=10) as p:
        started(p)
        with capture_logs() as logs:
            execute(
                users,
                "ALTER TABLE users RENAME COLUMN ssn TO ssn2",
                "ALTER TABLE users RENAME COLUMN password_hash TO pwh2",
                "UPDATE users SET name = 'changed' WHERE id = 1",  # the Relation, a re-snapshot
                "INSERT INTO users VALUES (31, 'new', 'SSN-RAW-31', 'PW-RAW-31')",
            )
            # Every row re-read under the new name (the re-snapshot), and the new one streamed.
            p.wait(lambda: renamed_everywhere(p, 31))
            p.wait(lambda: p.snapshot_done() and not p.snapshot_state().get("queue"))
        state = p.topic_state("public.users")
        assert {row["ssn2"] for row in state.values()} == {"***"}
        assert not any({"pwh2", "password_hash", "ssn"} & set(row) for row in state.values())
        no_raw(log_dir)
        renames = {(e["was"], e["column"]) for e in logs if e["event"] == "filter.column_renamed"}
        assert renames == {("ssn", "ssn2"), ("password_hash", "pwh2")}
        p.stop()
        # The YAML still names ssn: the next start refuses, before any row is read.
        p.error = None
        p.start()
        p.wait(lambda: p.error is not None or bool(p.sources[-1].streaming))
        assert isinstance(p.error, SourceMisconfigured), p.error
        assert "ssn, password_hash, which the table does not have" in str(p.error)
    no_raw(log_dir)


@pytest.mark.pgcore
def test_a_masked_column_renamed_while_stopped_and_its_name_reused_stay_masked(
    users: str, tmp_path: Path
) -> None:
    log_dir = tmp_path / "log"
    with stopped_after_publishing(users, log_dir, MASKED) as p:
        execute(
            users,
            "ALTER TABLE users RENAME COLUMN ssn TO ssn2",
            "ALTER TABLE users ADD COLUMN ssn text",
            "UPDATE users SET name = 'after', ssn = 'SSN-RAW-new' WHERE id = 3",
        )
        with capture_logs() as logs:
            p.start()
            p.wait(lambda: renamed_everywhere(p, 30))
            p.wait(lambda: p.snapshot_done() and not p.snapshot_state().get("queue"))
        row = p.topic_state("public.users")[3]
        assert (row["ssn"], row["ssn2"]) == ("***", "***")
        assert any(e["event"] == "filter.column_renamed" for e in logs)
    no_raw(log_dir)


@pytest.mark.pgcore
def test_a_masked_column_renamed_twice_behind_the_stream_is_not_streamed_raw(
    users: str, tmp_path: Path
) -> None:
    log_dir = tmp_path / "log"
    with stopped_after_publishing(users, log_dir, MASKED) as p:
        # The WAL between the renames calls the masked column ssn2; when the stream reads it,
        # the catalog gives that name to a new column.
        execute(
            users,
            "ALTER TABLE users RENAME COLUMN ssn TO ssn2",
            "UPDATE users SET ssn2 = 'SSN-RAW-x3' WHERE id = 3",
            "ALTER TABLE users RENAME COLUMN ssn2 TO x",
            "ALTER TABLE users ADD COLUMN ssn2 text",
            "UPDATE users SET name = 'after', ssn2 = 'plain' WHERE id = 4",
        )
        with capture_logs() as logs:
            p.start()
            p.wait(lambda: p.topic_state("public.users")[4].get("ssn2") == "plain")
            # The re-snapshot the renames call for re-reads every row as the catalog has it.
            p.wait(lambda: all("x" in row for row in p.topic_state("public.users").values()))
            p.wait(lambda: p.snapshot_done() and not p.snapshot_state().get("queue"))
        state = p.topic_state("public.users")
        assert {row["x"] for row in state.values()} == {"***"}
        no_raw(log_dir)  # SSN-RAW-x3 was streamed as ssn2 before the fix
        left_out = [e for e in logs if e["event"] == "filter.column_left_out"]
        assert [e["column"] for e in left_out] == ["ssn2"]
    no_raw(log_dir)


@pytest.mark.pgcore
def test_a_left_out_column_renamed_while_stopped_and_its_name_reused_stops_the_start(
    users: str, tmp_path: Path
) -> None:
    log_dir = tmp_path / "log"
    with stopped_after_publishing(users, log_dir, USERS) as p:
        execute(
            users,
            "ALTER TABLE users RENAME COLUMN password_hash TO pwh2",
            "ALTER TABLE users ADD COLUMN password_hash text",
            "UPDATE users SET name = 'after' WHERE id = 3",
        )
        p.start()
        p.wait(lambda: p.error is not None or bool(p.sources[-1].streaming))
        assert isinstance(p.error, SourceMisconfigured), p.error
        assert "pwh2, never published, may be the column it left out" in str(p.error)
    no_raw(log_dir)


@pytest.mark.pgcore
def test_a_column_named_like_a_masked_one_only_by_case_is_reported(
    users: str, tmp_path: Path
) -> None:
    execute(users, 'ALTER TABLE users ADD COLUMN "SSN" text')
    with (
        pipeline(users, tmp_path / "log", [USERS], snapshot="initial") as p,
        capture_logs() as logs,
    ):
        started(p)
    twins = [e for e in logs if e["event"] == "filter.case_twin"]
    assert [(e["column"], e["like"]) for e in twins] == [("SSN", "ssn")]
    assert "mask or leave out 'SSN' too" in twins[0]["fix"]


@pytest.mark.pgcore
def test_doctor_names_a_renamed_masked_column_and_a_case_twin(users: str) -> None:
    from connectors.postgres import PostgresSourceConfig
    from connectors.postgres.doctor.server import doctor

    config = PostgresSourceConfig.model_validate(
        {"type": "postgres", "dsn": users, "tables": [USERS]}
    )
    label = "masked and left-out columns"

    def check() -> Any:
        [found] = [c for c in doctor(config, "doc") if c.name.endswith(label)]
        return found

    assert check().ok
    execute(users, 'ALTER TABLE users ADD COLUMN "SSN" text')
    assert check().ok and "'SSN' is named like 'ssn' only by case" in check().detail
    execute(users, "ALTER TABLE users RENAME COLUMN ssn TO ssn2")
    assert not check().ok and "names ssn, which the table does not have" in check().detail
