"""A PostgreSQL lane runs from a clone under a private (mode 700) directory, as a root user's
``~/project`` is: the harness runs ``initdb``, ``postgres`` and ``pg_basebackup`` as the
``postgres`` OS user, who cannot reach the clone's tests/pg/target (see
``tests/services/pg_reachable.py``).

The clone is made with ``git clone`` from this checkout; ``make pgbins``'s binaries are linked
into it (hard links: the same files, reached only through the private directory). PostgreSQL 17
runs a core test and a standby test, whose ``pg_basebackup`` comes from 18's installation.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services.pg_binaries import ENV_BIN_DIR, ENV_VERSION, PG_BINS
from tests.services.pg_reachable import ENV_CACHE
from tests.services.postgres import ENV_DSN

ROOT = Path(__file__).resolve().parents[2]
VERSION = "17"
TESTS = [
    "tests/integration/test_pg_schema_changes.py::"
    "test_a_rename_keeps_the_column_id_and_a_drop_and_add_does_not",
    "tests/integration/test_pg_standby.py::test_standby_refuses_what_it_cannot_write",
]


@pytest.fixture
def cache() -> Iterator[Path]:
    """A cache of its own, so the copies are made by this run (not found from an earlier one);
    in the system temp dir, which the postgres user can reach."""
    path = Path(tempfile.mkdtemp(prefix="cdc-test-pg-cache-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def private_clone(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    home.chmod(0o700)  # whatever the umask
    clone = home / "project"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    for major in (VERSION, "18"):
        source = PG_BINS / major
        assert source.is_dir(), f"{source} is missing: run `make pgbins`"
        shutil.copytree(source, clone / "tests/pg/target" / major, copy_function=os.link)
    return clone


def test_a_pg_lane_runs_from_a_clone_under_a_private_directory(tmp_path: Path, cache: Path) -> None:
    clone = private_clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in (ENV_DSN, ENV_BIN_DIR)}
    env.update({ENV_VERSION: VERSION, ENV_CACHE: str(cache)})
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += ["--import-mode=importlib", "-x", f"--basetemp={tmp_path / 'inner'}", *TESTS]
    proc = subprocess.run(
        argv, cwd=clone, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "2 passed" in proc.stdout, proc.stdout[-3000:]
    if os.geteuid() == 0:  # as root, the binaries ran from copies the postgres user reaches
        copies = sorted(p.name.split(".")[0] for p in cache.iterdir())
        assert copies == ["17", "18"], copies
