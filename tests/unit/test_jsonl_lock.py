"""The jsonl sink's lock, on real files: one open sink per directory; another open is
unavailable (retried) until the first is closed, so a paused leader's late appends cannot
interleave with a new leader's (cdc.runtime.standby)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cdc.contracts.errors import SinkUnavailable
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.support.logging import get_logger
from cdc.support.retry import Decision, classify
from sinks.jsonl import JsonlSinkPlugin
from sinks.jsonl.sink import JsonlSink

TOPIC = "p.public.items"
# Holds the directory's lock in another process until its stdin closes.
HOLDER = """
import sys
from tests.unit.test_jsonl_lock import sink
held = sink(sys.argv[1])
held.open()
print("held", flush=True)
sys.stdin.read()
held.close()
"""


def sink(path: str | Path) -> JsonlSink:
    config = JsonlSinkPlugin.config_model(name="files", type="jsonl", path=str(path))
    context = SinkContext("p", "files", [("public", "items")], _NoSchemas(), get_logger())
    return JsonlSinkPlugin.create(config, context)


class _NoSchemas:
    def get(self, schema: str, table: str) -> None:
        return None


def test_a_second_writer_waits_until_the_first_closed(tmp_path: Path) -> None:
    first = sink(tmp_path)
    first.open()
    first.write([SinkRecord(TOPIC, 0, 0, {"id": 0}, {"op": "c", "after": {"id": 0}})])
    second = sink(tmp_path)
    with pytest.raises(SinkUnavailable) as raised:
        second.open()
    assert classify(raised.value) is Decision.RETRY
    first.flush()
    first.close()
    second.open()
    assert list(second.stored_offsets().values()) == [1]
    assert (tmp_path / f"{TOPIC}.jsonl").read_bytes().count(b"\n") == 1
    second.close()


def test_the_lock_holds_between_processes(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(SinkUnavailable):
            sink(tmp_path).open()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(30) == 0
    opened = sink(tmp_path)
    opened.open()  # the holder closed: its lock went with it
    opened.close()
