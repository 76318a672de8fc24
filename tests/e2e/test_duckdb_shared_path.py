"""Two sinks on one path (two DuckDB sinks on one file, two search sinks on one directory) break
each other at run time: ``cdc validate`` and ``cdc doctor`` refuse the file (exit 2), naming the
YAML path of the second sink's ``path`` and the first sink.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e.cli_helpers import cdc


def _pipeline(tmp_path: Path, *sinks: dict[str, str]) -> Path:
    data = {
        "version": 1,
        "name": "shared",
        "source": {
            "type": "postgres",
            "dsn": "postgresql://u@127.0.0.1:1/db",
            "tables": ["public.t"],
        },
        "sinks": list(sinks),
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("kind", "first", "second"),
    [
        ("duckdb", "out/wh.duckdb", "./out/../out/wh.duckdb"),  # one file, spelled two ways
        ("search", "out/search", "out/search/"),
    ],
)
def test_two_sinks_on_one_path_are_a_config_error(
    tmp_path: Path, kind: str, first: str, second: str
) -> None:
    pipeline = _pipeline(
        tmp_path,
        {"name": "jsonl_files", "type": "jsonl", "path": "out/files"},
        {"name": "one", "type": kind, "path": first},
        {"name": "two", "type": kind, "path": second},
    )
    for command in ("validate", "doctor"):
        result = cdc(command, str(pipeline), cwd=tmp_path)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        output = result.stdout + result.stderr
        assert "sinks[2].path" in output, output
        assert f"{second!r} is sink 'one''s path too (sinks[1].path)" in output, output
        assert "give each sink its own path" in output


def test_sinks_on_their_own_paths_are_valid(tmp_path: Path) -> None:
    pipeline = _pipeline(
        tmp_path,
        {"name": "one", "type": "duckdb", "path": "out/one.duckdb"},
        {"name": "two", "type": "duckdb", "path": "out/two.duckdb"},
        {"name": "search", "type": "search", "path": "out/search"},
    )
    result = cdc("validate", str(pipeline), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
