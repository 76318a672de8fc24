"""``bench/verify.py``'s measure of ``cdc verify``'s memory: the peak RSS of the verify process
alone, not of the bench that spawned it."""

from __future__ import annotations

import os
from pathlib import Path

from bench.verify import measured

#: Far above what a bare interpreter touches (about 10 MB), far below what a machine has.
BALLAST_MB = 300


def test_a_command_s_peak_rss_is_its_own_not_the_bench_s(tmp_path: Path) -> None:
    # The bench writes the table into DuckDB itself first, so its own peak grows with the
    # table; wait4's ru_maxrss of a child starts from that peak (kept across execve), which is
    # what the bench reported as verify's growth. Here the bench's peak is the ballast's.
    ballast = b"x" * (BALLAST_MB << 20)  # written, so resident
    env = dict(os.environ)
    small, _ = measured(tmp_path, env, "-c", "print('small')")
    big, out = measured(tmp_path, env, "-c", "data = b'x' * (128 << 20); print(len(data))")
    assert len(ballast) == BALLAST_MB << 20  # held through both commands
    assert small["ru_maxrss_mb"] >= BALLAST_MB  # the former measure: the bench's peak
    assert small["peak_rss_mb"] < BALLAST_MB / 2
    assert 128 <= big["peak_rss_mb"] < BALLAST_MB  # a command's own memory is counted
    assert out == f"{128 << 20}\n"


def test_a_module_runs_as_python_m_runs_it(tmp_path: Path) -> None:
    figures, out = measured(tmp_path, dict(os.environ), "-m", "json.tool", "--help")
    assert out.startswith("usage: python -m json.tool")
    assert figures["peak_rss_mb"] > 0
