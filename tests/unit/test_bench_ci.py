"""``bench/ci.py`` (``make bench-ci``): every bench runs in CI with flags it takes; a crash or a
timeout fails the run, figures never do, and every figure line is printed again at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import ci

ROOT = Path(__file__).resolve().parents[2]
FIGURE = '{"bench": "%s", "metric": "m_ms", "ours": 1.0, "baseline": null, "ratio": null}'


def _bench_scripts() -> set[str]:
    return {
        p.stem
        for p in (ROOT / "bench").glob("*.py")
        if 'if __name__ == "__main__"' in p.read_text() and p.stem != "ci"
    }


def test_every_bench_runs_in_ci_or_is_covered_by_one_that_does() -> None:
    modules = {run.argv[1].removeprefix("bench.") for run in ci.RUNS}
    assert sorted(_bench_scripts() - modules - set(ci.COVERED)) == [], (
        "give the new bench its small sizes in bench/ci.py's RUNS"
    )
    assert set(ci.COVERED.values()) <= {run.name for run in ci.RUNS}


def test_every_run_passes_only_flags_its_bench_takes() -> None:
    runs = ci.present()
    helps = {
        run.name: subprocess.Popen(
            [sys.executable, *run.argv[:2], "--help"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for run in runs
    }
    unknown = {}
    for run in runs:
        out, err = helps[run.name].communicate(timeout=120)
        assert helps[run.name].returncode == 0, (run.name, err.strip().splitlines()[-1:])
        flags = [a for a in run.argv[2:] if a.startswith("--")]
        if missing := [f for f in flags if f not in out]:
            unknown[run.name] = missing
    assert unknown == {}


def test_a_crash_fails_the_run_and_every_figure_line_is_printed_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runs = [
        ci.Run("fine", ("-c", f"print('working'); print('{FIGURE % 'fine'}')")),
        ci.Run("crash", ("-c", f"print('{FIGURE % 'crash'}'); raise SystemExit(3)")),
        ci.Run("slow", ("-c", "import time; time.sleep(60)")),
        ci.Run("segv", ("-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")),
    ]
    outcome = ci.run_all(runs, timeout_s=5)
    assert outcome.exits == {"fine": 0, "crash": 3, "slow": "timeout", "segv": "SIGSEGV"}
    assert outcome.failed == ["crash", "slow", "segv"]
    ci.report(outcome)
    lines = capsys.readouterr().out.splitlines()
    assert "working" in lines  # each bench's output, as it comes
    figures = [json.loads(line) for line in lines if line.startswith(ci.FIGURE_PREFIX)]
    at_end = [json.loads(line) for line in lines[-6:]]
    assert [f["bench"] for f in at_end] == ["fine", "crash", "ci", "ci", "ci", "ci"]
    assert figures[:2] == at_end[:2]  # printed as they came, and again at the end
    assert [f["metric"] for f in at_end[2:]] == [f"{r.name}_run_s" for r in runs]


# A server the bench started and left running: it holds the bench's output open.
LEAK = """
import subprocess, sys
server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(server.pid)
"""


def test_what_a_bench_leaves_running_is_ended_and_does_not_hold_the_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome = ci.run_all([ci.Run("leak", ("-c", LEAK))], timeout_s=60)
    assert outcome.exits == {"leak": 0} and outcome.failed == []
    lines = capsys.readouterr().out.splitlines()
    left = int(next(line for line in lines if line.isdigit()))
    assert "<== bench leak: processes it left running were ended" in lines
    with pytest.raises(ProcessLookupError):
        os.kill(left, 0)


def test_list_prints_each_command_and_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert ci.main(["--list", "--only", "pg_stream", "pg_filters"]) == 0
    commands = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert commands == [
        {
            "name": "pg_stream",
            "argv": [
                *("python", "-m", "bench.pg_stream"),
                *("--rows", "50000", "--big", "50000", "--steady-s", "3"),
            ],
        },
        {
            "name": "pg_filters",
            "argv": [
                *("python", "-m", "bench.pg_stream"),
                *("--filters", "--rows", "10000", "--rounds", "1"),
            ],
        },
    ]
