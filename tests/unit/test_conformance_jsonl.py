"""The conformance kit run against the jsonl sink, on real files.

The jsonl sink is append-only: it writes one line per record in delivery order and compares no
source positions, so it declares ``guards_positions = False`` and the kit leaves out its two
checks of a late, older change. Everything else holds as for the upsert sinks: a reader that
applies the lines in order sees the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.contracts.sink import Sink, SinkContext
from cdc.testing.conformance import TOPIC, SinkConformance
from sinks.jsonl import JsonlSinkPlugin


class TestJsonlConformance(SinkConformance):
    guards_positions = False

    @pytest.fixture(autouse=True)
    def _store(self, tmp_path: Path) -> None:
        self.path = tmp_path / "files"

    def make_sink(self, context: SinkContext) -> Sink:
        config = JsonlSinkPlugin.config_model(name="kit", type="jsonl", path=str(self.path))
        return JsonlSinkPlugin.create(config, context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        """The rows a reader gets by applying the topic's lines in file order."""
        file = self.path / f"{TOPIC}.jsonl"
        rows: dict[int, dict[str, Any]] = {}
        for line in file.read_bytes().splitlines() if file.exists() else []:
            record = orjson.loads(line)
            value = record["value"]
            if value is None or value["op"] == "d":  # a tombstone, or the delete before it
                rows.pop(record["key"]["id"], None)
            else:
                rows[record["key"]["id"]] = value["after"]
        return rows
