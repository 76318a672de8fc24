"""``cdc sink --rebuild`` refuses what it cannot do with exit 2 and the fix, before it opens
the log or any store: an unknown sink, ``--as-of`` without a copy or on a sink that keeps no
history, ``--into`` on a sink type that keeps no offsets beside its data (HTTP) or naming the
sink's own store, ``--into`` without ``--rebuild``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cli_helpers import cdc
from tests.e2e.rebuild_kit import duckdb_sink, pipeline_file

HOOK = {"name": "hooks", "type": "http", "url": "http://127.0.0.1:9/x", "secret": "s" * 24}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nope", "--rebuild"], "no sink 'nope' (sinks: wh, hist, hooks)"),
        (["wh", "--rebuild", "--as-of", "0/1"], "give it a place with --into"),
        (["wh", "--rebuild", "--into", "c.duckdb", "--as-of", "0/1"], "keeps no history"),
        (["hist", "--rebuild", "--into", "c.duckdb", "--as-of", "later"], "not a source position"),
        (["hooks", "--rebuild", "--into", "http://127.0.0.1:9/y"], "cannot be rebuilt into a copy"),
        (["wh", "--rebuild", "--into", "WH"], "the sink's own store"),
        (["wh", "--into", "c.duckdb"], "go with --rebuild"),
        (["wh", "--rebuild", "--reset-table", "public.items"], "leave --reset-table out"),
    ],
)
def test_what_cannot_be_done_exits_2_with_the_fix(
    tmp_path: Path, args: list[str], says: str
) -> None:
    sinks = [
        duckdb_sink("wh", tmp_path / "wh.duckdb"),
        duckdb_sink("hist", tmp_path / "hist.duckdb", mode="history"),
        HOOK,
    ]
    pipeline = pipeline_file(tmp_path, "errs", sinks)
    args = [str(tmp_path / "wh.duckdb") if a == "WH" else a for a in args]
    result = cdc("sink", str(pipeline), *args, cwd=tmp_path, env={"PG_DSN": "postgresql://x/y"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert says in result.stderr
    assert not (tmp_path / "log").exists()  # refused before the log was opened


def test_a_sink_without_stored_offsets_is_not_rebuilt_in_place(tmp_path: Path) -> None:
    pipeline = pipeline_file(tmp_path, "errs", [HOOK])
    result = cdc("sink", str(pipeline), "hooks", "--rebuild", cwd=tmp_path,
                 env={"PG_DSN": "postgresql://x/y"})  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "keeps no offsets beside its data" in result.stderr
    assert "give the sink a new name" in result.stderr
