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


def test_scale_runs_one_dimension_alone_with_its_sizes() -> None:
    from bench.scale import DIMENSIONS, parse

    args = parse(["--dimension", "tables", "--sizes", "1,100,1_000", "--soak-minutes", "2"])
    assert (args.dimension, args.sizes, args.soak_minutes) == (["tables"], [1, 100, 1000], 2.0)
    assert parse([]).dimension == DIMENSIONS  # every one by default
    assert "soak" in DIMENSIONS


@pytest.mark.parametrize(
    "argv",
    [
        ["--dimension", "tables", "--dimension", "sinks", "--sizes", "1,4"],  # whose sizes?
        ["--dimension", "tables", "--sizes", "100,1"],  # smallest first: growth is from it
        ["--dimension", "tables", "--sizes", "0,1"],
        ["--dimension", "rows"],
    ],
)
def test_scale_refuses_sizes_it_cannot_grow_from(argv: list[str]) -> None:
    from bench.scale import parse

    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2


@pytest.mark.parametrize(
    ("cost", "verdict"),
    [(1.2, "flat"), (0.5, "flat"), (20.0, "sublinear"), (100.0, "linear"), (1000.0, "WORSE")],
)
def test_scale_says_how_a_cost_grew_against_its_dimension(cost: float, verdict: str) -> None:
    from bench.scale_kit import growth

    # The dimension grew 100-fold, from 10 to 1,000.
    assert growth(1.0, cost, 10, 1000).endswith(verdict)


def test_scale_slope_of_samples() -> None:
    from bench.scale_kit import slope

    assert slope([(0.0, 100.0), (1.0, 102.0), (2.0, 104.0)]) == pytest.approx(2.0)
    assert slope([(0.0, 100.0)]) == 0.0


def test_peer_debezium_defaults_and_flags() -> None:
    from bench.peer_debezium import parse

    args = parse([])
    assert (args.rows, args.big, args.rounds, args.xmx) == (500_000, 1_000_000, 1, "512m")
    args = parse(["--rows", "20000", "--big", "40000", "--rounds", "2", "--xmx", "2g"])
    assert (args.rows, args.big, args.rounds, args.xmx) == (20_000, 40_000, 2, "2g")


def test_procstat_reads_a_live_process() -> None:
    from bench.procstat import ProcStats

    stats = ProcStats(os.getpid())
    assert stats.cpu_s() > 0
    assert 0 < stats.rss_mb() <= stats.peak_mb()


@pytest.mark.parametrize("flag", ["--rows", "--big", "--steady-s", "--rounds"])
def test_pg_stream_refuses_an_empty_workload(flag: str) -> None:
    # A zero-row workload or a zero-second steady phase has no rate: it crashed with
    # ZeroDivisionError or IndexError after minutes of set-up; now argparse says why at once.
    done = subprocess.run(
        [sys.executable, "bench/pg_stream.py", flag, "0"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"argument {flag}: must be above 0, not 0" in done.stderr
