"""What the live progress display draws (cdc.metrics.progress), rendered to a plain console; and
that off a terminal it neither draws nor claims the terminal from a source's own bar."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from cdc.config.pipeline import parse
from cdc.metrics import progress


def rendered(renderable: Any) -> str:
    console = Console(width=120, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


ROWS = [
    {
        "table": "public.a",
        "state": "running",
        "chunks_done": 3,
        "chunks_total": 10,
        "rows": 30_000,
        "rows_per_s": 12_345.6,
        "eta_s": 95.0,
    },
    {"table": "public.b", "state": "queued"},
    {"table": "public.c", "state": "failed", "reason": "permission denied"},
]


def test_the_table_shows_chunks_rows_rate_eta_and_failures() -> None:
    text = rendered(progress.snapshot_table(ROWS))
    assert "public.a" in text and "3/10" in text and "30,000" in text and "12,346" in text
    assert "1 min 35 s" in text
    assert "failed: public.c: permission denied" in text


def test_the_summary_names_the_tables_done_and_their_rows() -> None:
    rows = [{"table": "public.a", "state": "done", "rows": 1_500}, *ROWS[1:]]
    assert progress.snapshot_summary(rows).plain == "snapshot done: public.a (1,500 rows)"


def test_the_stream_line_shows_the_position_and_when_it_moved() -> None:
    watch = progress.StreamWatch()
    assert "waiting" in watch.render({}).plain
    offsets = {"postgres": {"lsn": 1, "lsn_str": "0/1"}, "captured": ["public.a"]}
    line = watch.render(offsets).plain
    assert line.startswith("streaming: position postgres 0/1, moved ")
    watch.lag = lambda: 2.25  # in the process that runs the source
    assert watch.render(offsets).plain.startswith("streaming: lag 2.2 s, position postgres 0/1")


def test_off_a_terminal_nothing_is_drawn_nor_claimed(capsys: Any) -> None:
    pipeline = parse("version: 1\nname: p\nsource:\n  type: generator\n  tables: [public.t]\n")
    with progress.TerminalProgress(pipeline):  # pytest's stderr is no terminal
        pass
    assert not progress.claimed()
    assert capsys.readouterr().err == ""
    assert progress.progress_echo(print) is print
