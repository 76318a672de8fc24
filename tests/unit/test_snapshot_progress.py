"""Progress reporters: structured lines off a terminal, a rich bar on one."""

from __future__ import annotations

import structlog
from structlog.testing import capture_logs

from snapshots.progress import LogReporter, RichReporter, reporter

FIGURES = {
    "chunks_done": 3,
    "chunks_total": 10,
    "rows": 150_000,
    "rows_per_s": 50_000.0,
    "eta_s": 7.0,
    "kind": "initial",
}


def test_log_lines_carry_the_figures() -> None:
    with capture_logs() as logs:
        LogReporter(structlog.get_logger()).chunk_done("public.t", 2, 50_000, FIGURES)
    [line] = logs
    assert line["event"] == "snapshot.chunk_done"
    assert (line["table"], line["chunk"], line["rows"]) == ("public.t", 2, 50_000)
    assert (line["rows_per_s"], line["eta_s"], line["chunks_total"]) == (50_000.0, 7.0, 10)


def test_the_bar_follows_chunks() -> None:
    bar = RichReporter()
    try:
        bar.chunk_done("public.t", 2, 50_000, FIGURES)
        bar.chunk_done("public.t", 3, 50_000, {**FIGURES, "chunks_done": 4})
        [task] = bar._progress.tasks
        assert (task.completed, task.total) == (4, 10)
    finally:
        bar.close()


def test_off_a_terminal_the_log_reporter_is_chosen() -> None:
    assert isinstance(reporter(structlog.get_logger()), LogReporter)
