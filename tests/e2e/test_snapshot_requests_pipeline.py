"""Online snapshot requests through ``cdc run`` on a real PostgreSQL 15 into a real Redis: a
poison request never stops the stream or the sinks, survives no restart, and can be cancelled;
``--where`` is checked with PostgreSQL's lexical rules."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.sinks_kit import Cache, create_table, execute, redis_url, status, write_pipeline
from tests.e2e.snapshot_helpers import offsets, run_log_events
from tests.e2e.test_snapshot_pipeline import drop_objects

__all__ = ["redis_url"]  # a fixture


def test_a_poison_request_fails_alone_and_can_be_cancelled(
    pg_db: str, redis_url: str, tmp_path: Path
) -> None:
    create_table(pg_db, "t", 2000)
    prefix = f"poison{uuid.uuid4().hex[:8]}"
    pipeline = write_pipeline(
        tmp_path, pg_db, redis_url, prefix, ["public.t"], snapshot_chunk_rows=500
    )
    env, cache, log = {}, Cache(redis_url, prefix), tmp_path / "run.log"
    runs: list[subprocess.Popen[str]] = []
    try:
        runs.append(process := start_run(pipeline, tmp_path, env))
        wait_for(lambda: cache.equals(pg_db, "public.t"), 90, process=process, log=log)
        # Passes every check before the run (the sample rows are ids 1 to 100); row 1500 fails.
        where = "1/(id-1500) > -1000"
        failed = cdc(
            "snapshot", str(pipeline), "--table", "public.t", "--where", where, "--wait",
            "--timeout-s", "90", cwd=tmp_path, env=env,
        )  # fmt: skip
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "failed" in failed.stdout and "division by zero" in failed.stdout
        request = failed.stdout.split()[2]  # "requested snapshot <id> of public.t ..."
        # The stream and the sinks go on.
        execute(pg_db, "UPDATE t SET v = 'after', n = 1 WHERE id IN (3, 1500)")
        wait_for(lambda: cache.equals(pg_db, "public.t"), 60, process=process, log=log)
        [row] = [r for r in status(pipeline, tmp_path, env)["snapshot"] if r["state"] == "failed"]
        assert row["request"] == request and "division by zero" in row["reason"]
        text = cdc("status", str(pipeline), cwd=tmp_path, env=env).stdout
        assert request in text and "failed" in text
        [logged] = run_log_events(tmp_path, "snapshot.request_failed")
        assert logged["request"] == request
        # A restart neither dies nor replays it.
        assert stop(process)[0] == 0
        runs.append(process := start_run(pipeline, tmp_path, env))
        wait_for(lambda: len(run_log_events(tmp_path, "source.streaming")) == 2, 60)
        execute(pg_db, "UPDATE t SET n = 2 WHERE id = 4")
        wait_for(lambda: cache.equals(pg_db, "public.t"), 60, process=process, log=log)
        assert len(run_log_events(tmp_path, "snapshot.planned")) == 1
        # Cancelled, it is gone; a later valid request is read.
        cancelled = cdc(
            "snapshot", str(pipeline), "--cancel", request, "--wait", "--timeout-s", "60",
            cwd=tmp_path, env=env,
        )  # fmt: skip
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "cancelled" in cancelled.stdout
        assert not [r for r in status(pipeline, tmp_path, env)["snapshot"] if r["state"] != "done"]
        done = cdc(
            "snapshot", str(pipeline), "--table", "public.t", "--where", "id <= 600",
            "--wait", "--timeout-s", "90", cwd=tmp_path, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert offsets(tmp_path / "log")["snapshot"]["tables"]["public.t"]["rows"] == 600
        wait_for(lambda: cache.equals(pg_db, "public.t"), 60, process=process, log=log)
        assert process.poll() is None
    finally:
        drop_objects(pipeline, *runs)


def test_snapshot_arguments_and_where_quoting(pg_db: str, tmp_path: Path) -> None:
    create_table(pg_db, "t", 10)
    pipeline = write_pipeline(tmp_path, pg_db, "redis://127.0.0.1:1/0", "x", ["public.t"])
    env: dict[str, str] = {}
    both = cdc("snapshot", str(pipeline), "--table", "public.t", "--cancel-all", cwd=tmp_path)
    assert both.returncode == 2 and "exactly one" in both.stderr
    none = cdc("snapshot", str(pipeline), cwd=tmp_path, env=env)
    assert none.returncode == 2
    where = cdc("snapshot", str(pipeline), "--cancel-all", "--where", "id > 1", cwd=tmp_path)
    assert where.returncode == 2 and "--where goes with --table" in where.stderr
    quoted = cdc(
        "snapshot", str(pipeline), "--table", "public.t", "--where", "v = 'a;b' OR v <> $$;$$",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    # Accepted by every check; writing the request needs the signal table or messages only.
    assert quoted.returncode == 0, quoted.stderr
    second = cdc(
        "snapshot", str(pipeline), "--table", "public.t", "--where", "v = 'a'; DELETE FROM t",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert second.returncode == 2 and "';' ends a statement" in second.stderr
    # An id the log does not hold (yet: a pipeline not running has not read its request).
    unknown = cdc("snapshot", str(pipeline), "--cancel", "nosuch", cwd=tmp_path, env=env)
    assert unknown.returncode == 0, unknown.stderr
    assert "no request nosuch is stored" in unknown.stderr
