"""The plugin as cdc finds it: the entry point of the installed distribution, config errors
(``cdc validate``), and ``cdc doctor``'s checks."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest
from cdc.contracts import plugins

from cdc_sink_sqlite import SqliteSinkConfig, SqliteSinkPlugin
from cdc_sink_sqlite.doctor import doctor


def test_cdc_finds_the_installed_plugin_by_its_entry_point() -> None:
    assert plugins.load(plugins.SINK_GROUP, "sqlite") is SqliteSinkPlugin
    assert "sqlite" in plugins.available(plugins.SINK_GROUP)
    # Installed as a distribution of its own (pip install), not found on a path by chance.
    (entry,) = [e for e in distribution("cdc-sink-sqlite").entry_points if e.name == "sqlite"]
    assert entry.group == "cdc.sinks" and entry.load() is SqliteSinkPlugin


def validate(tmp_path: Path, sink: str) -> subprocess.CompletedProcess[str]:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "version: 1\nname: p\nsource:\n  type: generator\n  tables: [public.t]\n"
        f"sinks:\n  - {{name: lite, type: sqlite{sink}}}\n"
    )
    command = [sys.executable, "-m", "cdc.cli.main", "validate", str(pipeline)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_a_valid_section_validates(tmp_path: Path) -> None:
    result = validate(tmp_path, ", path: out/p.db, busy_timeout_s: 2")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("", "sinks[0].path"),
        (", path: ':memory:'", "an in-memory or URI database would lose the offsets"),
        (", path: p.db, busy_timeout_s: 0", "sinks[0].busy_timeout_s"),
        (", path: p.db, pth: x", "sinks[0].pth"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_path(
    tmp_path: Path, section: str, expected: str
) -> None:
    result = validate(tmp_path, section)
    assert result.returncode == 2, result.stdout + result.stderr
    assert expected in result.stdout + result.stderr


def test_doctor_says_what_is_wrong_with_the_file(tmp_path: Path) -> None:
    def check(path: Path) -> tuple[str, str]:
        config = SqliteSinkConfig(name="lite", type="sqlite", path=str(path))
        version, found = doctor(config, "p")
        assert version.ok
        return found.level, found.detail

    assert check(tmp_path / "new" / "p.db")[0] == "ok"
    assert check(tmp_path) == ("fail", f"{tmp_path} is a directory")
    (tmp_path / "junk.db").write_bytes(b"not a database, not at all" * 100)
    assert check(tmp_path / "junk.db")[0] == "fail"
    db = tmp_path / "p.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another writer, mid-transaction
    assert check(db)[0] == "warn"
    holder.execute("ROLLBACK")
    assert check(db) == ("ok", f"{db} opens for writing")
    holder.close()
