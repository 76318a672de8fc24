"""Every bench runs the way the README and the docs give it: ``python bench/<name>.py`` from the
checkout (the script's own directory, not the checkout, is then first on ``sys.path``), and
``python -m bench.<name>``. ``--help`` imports everything a run imports, so a script that
cannot find its own package fails here in a second, not on a user's machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    p.name for p in (ROOT / "bench").glob("*.py") if 'if __name__ == "__main__"' in p.read_text()
)


def _env() -> dict[str, str]:
    # As a user's shell has it: nothing puts the checkout on the path but the command itself.
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_every_bench_script_is_found() -> None:
    assert {"pg_stream.py", "pg_snapshot.py", "log_throughput.py", "sinks.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("way", ["script", "module"])
def test_every_bench_answers_help_run_as_documented(way: str) -> None:
    commands = {
        name: [sys.executable, f"bench/{name}"]
        if way == "script"
        else [sys.executable, "-m", f"bench.{name.removesuffix('.py')}"]
        for name in SCRIPTS
    }
    running = {
        name: subprocess.Popen(
            [*argv, "--help"],
            cwd=ROOT,
            env=_env(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name, argv in commands.items()
    }
    failed = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=120)
        if process.returncode != 0 or "usage" not in out:
            failed[name] = (process.returncode, err.strip().splitlines()[-1:])
    assert failed == {}
