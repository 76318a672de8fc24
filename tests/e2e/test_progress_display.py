"""The live progress display on a terminal (a pseudo-terminal here): ``cdc run`` snapshotting
a real PostgreSQL table of 200,000 rows shows the table, its chunks and rows, then the stream;
``cdc snapshot --wait`` shows its request's progress the same way. With stderr a pipe, the same
commands write today's JSON log events and no terminal escape at all."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path
from typing import IO, Any

import orjson

from tests.e2e.cli_helpers import cdc_env, start_run, stop, wait_for
from tests.e2e.snapshot_helpers import create_table, write_pipeline

ROWS = 200_000
CHUNK_ROWS = 2_000
CHUNKS = ROWS // CHUNK_ROWS
ESCAPE = "\x1b["
#: A row of the display's table while the table is read: its chunks done of total.
RUNNING_ROW = re.compile(r"public\.t\s*│\s*running\s*│\s*(\d+)/(\d+)")


class Terminal:
    """A pseudo-terminal of 120 columns whose output a thread collects (the master side)."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every writer closed the slave side
                return
            if not data:
                return
            self._chunks.append(data)

    @property
    def text(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def close(self) -> None:
        os.close(self.slave)
        self._reader.join(10)
        os.close(self.master)


def cdc_process(args: list[str], cwd: Path, stdout: IO[Any] | int, stderr: Any) -> Any:
    return subprocess.Popen(
        [sys.executable, "-m", "cdc.cli.main", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=cdc_env({"TERM": "xterm-256color"}),
    )


def pipeline_of(tmp_path: Path, dsn: str) -> Path:
    create_table(dsn, ROWS)
    return write_pipeline(tmp_path, dsn, snapshot_chunk_rows=CHUNK_ROWS, snapshot_workers=1)


def json_events(text: str) -> list[str]:
    return [orjson.loads(line)["event"] for line in text.splitlines() if line.startswith("{")]


def test_cdc_run_on_a_terminal_shows_the_snapshot_then_the_stream(
    pg_db: str, tmp_path: Path
) -> None:
    pipeline = pipeline_of(tmp_path, pg_db)
    terminal = Terminal()
    run = cdc_process(["run", str(pipeline)], tmp_path, subprocess.DEVNULL, terminal.slave)
    try:
        # cdc run runs the source itself, so the stream's line carries its lag.
        wait_for(lambda: "streaming: lag " in terminal.text, timeout=120, process=run)
        assert stop(run, signal.SIGTERM, 30)[0] == 0
    finally:
        if run.poll() is None:
            stop(run, signal.SIGKILL)
        terminal.close()
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.text)  # the words, escapes out
    assert ESCAPE in terminal.text, "the display draws with terminal escapes"
    assert "public.t" in screen and "running" in screen
    shown = [(int(d), int(t)) for d, t in RUNNING_ROW.findall(screen)]
    assert any(done < total for done, total in shown), f"no chunk count under way: {shown}"
    assert all(total >= CHUNKS for _, total in shown), shown
    assert "snapshot public.t ━" not in screen, "the source's own bar stays off the terminal"
    assert f"snapshot done: public.t ({ROWS:,} rows)" in screen
    assert "pipeline.started" in screen, "log events still appear, above the display"


def test_cdc_run_with_stderr_a_pipe_writes_json_events_only(pg_db: str, tmp_path: Path) -> None:
    pipeline = pipeline_of(tmp_path, pg_db)
    log = tmp_path / "run.log"
    run = start_run(pipeline, tmp_path)  # stdout and stderr into run.log
    try:
        wait_for(lambda: "snapshot.finished" in log.read_text(), timeout=120, process=run)
        assert stop(run, signal.SIGTERM, 30)[0] == 0
    finally:
        if run.poll() is None:
            stop(run, signal.SIGKILL)
    text = log.read_text()
    assert ESCAPE not in text
    assert not [line for line in text.splitlines() if line and not line.startswith("{")]
    assert "pipeline.started" in json_events(text)


def test_snapshot_wait_on_a_terminal_shows_the_request_and_a_pipe_gets_lines(
    pg_db: str, tmp_path: Path
) -> None:
    pipeline = pipeline_of(tmp_path, pg_db)
    run = start_run(pipeline, tmp_path)
    try:
        log = tmp_path / "run.log"
        wait_for(lambda: "snapshot.finished" in log.read_text(), timeout=120, process=run)
        wait_args = [
            "snapshot",
            str(pipeline),
            "--table",
            "public.t",
            "--wait",
            "--timeout-s",
            "120",
        ]
        terminal = Terminal()
        try:
            waiting = cdc_process(wait_args, tmp_path, subprocess.PIPE, terminal.slave)
            out, _ = waiting.communicate(timeout=150)
        finally:
            terminal.close()
        assert waiting.returncode == 0, (out, terminal.text)
        screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.text)
        assert RUNNING_ROW.search(screen), screen
        assert re.search(rb"snapshot \S+ done", out), out
        assert b"chunks," not in out, "the display replaces the progress lines"
        piped = subprocess.run(
            [sys.executable, "-m", "cdc.cli.main", *wait_args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=150,
            env=cdc_env(),
        )
        assert piped.returncode == 0, piped.stderr
        assert re.search(r"public\.t: \d+/\d+ chunks, [\d,]+ rows", piped.stdout), piped.stdout
        assert ESCAPE not in piped.stdout + piped.stderr
    finally:
        stop(run, signal.SIGTERM, 30)
