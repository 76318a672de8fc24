"""Every bench ends with its figures as JSON lines, one a metric (``bench.report``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import Figures

BENCH = Path(__file__).resolve().parents[2] / "bench"
KEYS = ["bench", "metric", "ours", "baseline", "ratio"]


def test_a_figure_has_a_ratio_only_against_a_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    figures = Figures("demo")
    figures.add("rows_per_s", 150.0, 100.0)
    figures.add("latency_ms", 12.3456)
    figures.add("empty_ms", float("nan"), 3.0)
    figures.emit()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        {"bench": "demo", "metric": "rows_per_s", "ours": 150.0, "baseline": 100.0, "ratio": 1.5},
        {"bench": "demo", "metric": "latency_ms", "ours": 12.346, "baseline": None, "ratio": None},
        {"bench": "demo", "metric": "empty_ms", "ours": None, "baseline": 3.0, "ratio": None},
    ]


#: Runnable modules of bench/ that are no bench of their own (helper modules have no
#: ``__main__`` and are left out by that).
NOT_BENCHES = {
    "ci": "runs every bench and prints their figures again",
    "memory_probe": "the probe bench/memory.py runs inside cdc run",
}
SCRIPTS = sorted(
    p
    for p in BENCH.glob("*.py")
    if 'if __name__ == "__main__"' in p.read_text() and p.stem not in NOT_BENCHES
)


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_bench_emits_figures(script: Path) -> None:
    text = script.read_text()
    assert re.search(rf'Figures\(\s*"{script.stem}"', text) and ".emit()" in text


@pytest.mark.parametrize(
    "argv",
    [
        ["log_throughput.py", "--records", "2000", "--batch", "500"],
        ["pgoutput_decode.py", "--rounds", "1", "--repeat", "1"],
        ["pg_assemble.py", "--rows", "2000", "--batch", "500", "--repeat", "1"],
    ],
)
def test_a_bench_run_ends_with_one_json_line_a_metric(argv: list[str], tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # as a script from anywhere: the bench finds the checkout itself
        check=True,
    )
    lines = result.stdout.splitlines()
    figures = [json.loads(line) for line in lines if line.startswith('{"bench"')]
    assert figures and lines[-len(figures) :] == [json.dumps(f) for f in figures]
    for figure in figures:
        assert list(figure) == KEYS and figure["bench"] == Path(argv[0]).stem
        assert isinstance(figure["ours"], float)
