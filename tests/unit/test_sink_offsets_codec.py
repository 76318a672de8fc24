"""The sinks' stored offsets' one codec (sinks.offsets): the JSONL sink's state file and the
search sink's offsets file as their writers stored them before the codec still read, and the
sinks store the very same bytes (on real files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.log.base import TopicPartition
from cdc.support.logging import get_logger
from sinks.jsonl import JsonlSinkPlugin
from sinks.offsets import decode_offsets, encode_offsets
from sinks.search.config import SearchSinkConfig
from sinks.search.sink import SearchSink

ITEMS, ODD = "p.public.items", "p.public.a|b"  # a topic with "|": the partition is after the last

#: The JSONL sink's ``_state.json`` after it wrote the records of :func:`jsonl_records`, stored
#: before the codec.
JSONL_STATE_BEFORE = (
    b'{"offsets":{"p.public.items|0":5,"p.public.items|2":10,"p.public.a|b|1":1},'
    b'"files":{"p.public.items.jsonl":206,"p.public.a|b.jsonl":101}}'
)
#: The search sink's ``_offsets.<name>.json``, stored before the codec.
SEARCH_OFFSETS_BEFORE = b'{"p.public.items|0":7,"p.public.items|3":12}'


class _NoSchemas:
    def get(self, schema: str, table: str) -> None:
        return None


def context(tables: list[tuple[str, str]]) -> SinkContext:
    return SinkContext("p", "files", tables, _NoSchemas(), get_logger())


def jsonl_sink(path: Path) -> Any:
    config = JsonlSinkPlugin.config_model(name="files", type="jsonl", path=str(path))
    sink = JsonlSinkPlugin.create(config, context([("public", "items")]))
    sink.open()
    return sink


def jsonl_records() -> list[SinkRecord]:
    return [
        SinkRecord(ITEMS, 0, 4, {"id": 1}, {"op": "c", "after": {"id": 1}}),
        SinkRecord(ITEMS, 2, 9, {"id": 2}, {"op": "c", "after": {"id": 2}}),
        SinkRecord(ODD, 1, 0, {"id": 3}, {"op": "c", "after": {"id": 3}}),
    ]


def test_the_jsonl_sink_stores_the_state_it_stored_before(tmp_path: Path) -> None:
    sink = jsonl_sink(tmp_path)
    sink.write(jsonl_records())
    sink.flush()
    sink.close()
    assert (tmp_path / "_state.json").read_bytes() == JSONL_STATE_BEFORE


def test_a_jsonl_state_stored_before_reads_back(tmp_path: Path) -> None:
    (tmp_path / "_state.json").write_bytes(JSONL_STATE_BEFORE)
    sink = jsonl_sink(tmp_path)
    try:
        assert sink.stored_offsets() == {
            TopicPartition(ITEMS, 0): 5,
            TopicPartition(ITEMS, 2): 10,
            TopicPartition(ODD, 1): 1,
        }
    finally:
        sink.close()


def search_sink(path: Path) -> SearchSink:
    config = SearchSinkConfig(name="search", type="search", path=str(path))
    sink = SearchSink(config, context([]))
    sink.open()
    return sink


def test_search_offsets_stored_before_read_back_and_are_stored_again_byte_for_byte(
    tmp_path: Path,
) -> None:
    stored = tmp_path / "_offsets.search.json"
    stored.write_bytes(SEARCH_OFFSETS_BEFORE)
    sink = search_sink(tmp_path)
    expected = {TopicPartition(ITEMS, 0): 7, TopicPartition(ITEMS, 3): 12}
    assert sink.stored_offsets() == expected
    stored.unlink()
    sink.flush()  # nothing pending: the offsets file alone is written again
    sink.close()
    assert stored.read_bytes() == SEARCH_OFFSETS_BEFORE


@pytest.mark.parametrize(
    "stored",
    [
        {"p.public.a|b|1": 3, "t|0": 0},
        {b"p.public.a|b|1": b"3", b"t|0": b"0"},  # a Redis hash, undecoded
        {"p.public.a|b|1": "3", "t|0": "0"},  # a Redis hash, decoded
    ],
)
def test_every_stored_form_of_the_fields_decodes_alike(stored: dict[Any, Any]) -> None:
    offsets = decode_offsets(stored)
    assert offsets == {TopicPartition(ODD, 1): 3, TopicPartition("t", 0): 0}
    assert encode_offsets(offsets) == {"p.public.a|b|1": 3, "t|0": 0}
