"""The embedded log's connections, one per thread: a thread that starts while another registers
its connection keeps its own open.

The interleaving is forced, not hoped for: the registering thread's look at the live threads
starts the other thread and waits until it registered (or could not, because the look happens
under the lock). Read before the lock, the look left the new thread out and its connection was
closed under it (a segfault when it was inside a statement: three pipelines starting at once).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from cdc.log.embedded import shared
from cdc.log.embedded.shared import Connections


def test_a_thread_registering_meanwhile_keeps_its_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connections = Connections(tmp_path / "log.db", "normal", 5000)
    registered, checked = threading.Event(), threading.Event()
    outcome: list[Any] = []
    real = shared._alive_threads

    def newcomer() -> None:
        conn = connections.get()
        registered.set()
        checked.wait(10)
        try:
            outcome.append(conn.execute("SELECT 1").fetchone()[0])
        except Exception as exc:  # a closed connection: what the bug did
            outcome.append(type(exc).__name__)

    thread = threading.Thread(target=newcomer)

    def alive_then_a_newcomer() -> set[int | None]:
        found = real()  # the newcomer has not started: it is not among them
        if not thread.is_alive() and thread.ident is None:
            thread.start()
            registered.wait(2)  # it registers now, unless the lock holds it until we are done
        return found

    monkeypatch.setattr(shared, "_alive_threads", alive_then_a_newcomer)
    connections.get()  # this thread registers, and looks at the live threads
    monkeypatch.setattr(shared, "_alive_threads", real)
    assert registered.wait(10)
    checked.set()
    thread.join(10)
    assert outcome == [1]  # the newcomer's connection was left open
    assert len(connections) == 2
    connections.close()
