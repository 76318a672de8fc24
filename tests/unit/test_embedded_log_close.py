"""Closing the embedded log while another thread is inside a statement on its own connection.

CPython's sqlite3 frees a connection's database handle under a statement another thread is
running, which crashes the process: ``cdc run`` closes the log after its tasks' grace period,
and a task still in a commit then took the process down (seen as a segfault of a test worker).
The scenario runs in a child process, so a crash is a failed test here, not a dead test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    from cdc.contracts.errors import LogError
    from cdc.log.embedded.shared import Connections

    connections = Connections(Path(sys.argv[1]), "normal", 5000)
    started, outcome = threading.Event(), []
    SLOW = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000000) "
        "SELECT count(*) FROM c"
    )

    def worker():
        conn = connections.get()
        started.set()
        outcome.append(conn.execute(SLOW).fetchone()[0])  # still running when the log closes
        try:
            connections.get()
        except LogError as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait()
    time.sleep(0.3)
    assert connections.close()
    print("closed while running:", thread.is_alive(), flush=True)
    thread.join()
    print("statement:", outcome[0], flush=True)
    print("then:", outcome[1], flush=True)
    print("left open:", len(connections), flush=True)
    """
)


def test_closing_the_log_under_a_running_statement_lets_it_finish(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "log.db")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-2000:]}"
    assert child.stdout.splitlines() == [
        "closed while running: True",
        "statement: 20000000",
        "then: embedded log: the log is closed",
        "left open: 0",
    ]
