"""``cdc status`` shows topic names whole: off a terminal (a pipe, ``watch``, a file) with no
width limit, on a terminal at its own width, folding a name onto the next line rather than
cutting it to ``p1.public.t_i…``."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tests.e2e.cli_helpers import cdc, cdc_env

LONG = "public.t_inventory_movements_by_warehouse_and_day"
TOPIC = f"p1.{LONG}"


def _pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "p1.yaml"
    path.write_text(
        "version: 1\nname: p1\nsource:\n  type: generator\n"
        f"  tables: [{LONG}, public.t_item]\n  changes: 10\nlog:\n  type: embedded\n"
        "sinks:\n  - name: files\n    type: jsonl\n    path: out/files\n"
        "  - name: warehouse_duckdb\n    type: duckdb\n    path: out/w.duckdb\n"
    )
    return path


def _on_a_terminal(pipeline: Path, cwd: Path, columns: int) -> str:
    """``cdc status`` with stdout on a pseudo-terminal ``columns`` wide, whose TERM says
    ``dumb`` (Emacs's shell, an IDE's console): its size is still the terminal's."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in cdc_env().items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(
        [sys.executable, "-m", "cdc.cli.main", "status", str(pipeline)],
        cwd=cwd,
        env={**env, "TERM": "dumb"},
        stdout=follower,
        stderr=subprocess.DEVNULL,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other side closed: the process is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert process.wait(60) == 0
    os.close(leader)
    return b"".join(chunks).decode()


def test_status_off_a_terminal_never_cuts_a_name(tmp_path: Path) -> None:
    result = cdc("status", str(_pipeline(tmp_path)), cwd=tmp_path, env={"COLUMNS": "60"})
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout, result.stdout
    rows = [line for line in result.stdout.splitlines() if TOPIC in line]
    assert len(rows) == 2, result.stdout  # one row per sink, each with the whole name
    assert all("warehouse_duckdb" in line or "files" in line for line in rows)


def test_status_on_a_wide_terminal_uses_its_width(tmp_path: Path) -> None:
    text = _on_a_terminal(_pipeline(tmp_path), tmp_path, 200)
    assert "…" not in text, text
    assert sum(TOPIC in line for line in text.splitlines()) == 2, text


def test_status_on_a_narrow_terminal_folds_names_whole(tmp_path: Path) -> None:
    text = _on_a_terminal(_pipeline(tmp_path), tmp_path, 70)
    assert "…" not in text, text
    table_lines = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert max(len(line) for line in table_lines) <= 70, text
    cells = [line.split("│")[3].strip() for line in text.splitlines() if line.count("│") >= 9]
    assert TOPIC in "".join(cells[:8]), cells  # the first sink's first topic, folded
