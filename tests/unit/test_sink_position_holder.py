"""The file sinks' keeping of their consistent position between writes
(:class:`sinks.offsets.PositionHolder`), read from and written to a real file as the search and
JSONL sinks do (:func:`sinks.offsets.write_json`, :func:`sinks.offsets.with_position`)."""

from __future__ import annotations

from pathlib import Path

from cdc.log.base import TopicPartition
from sinks.offsets import (
    POSITION_FIELD,
    PositionHolder,
    encode_offsets,
    read_json,
    read_position,
    with_position,
    write_json,
)

OFFSETS = {TopicPartition("p.public.t", 0): 7}


def flush(holder: PositionHolder, path: Path, offsets: dict[TopicPartition, int]) -> None:
    """A sink's flush: the position to write beside the offsets, written, then noted."""
    position = holder.to_write(offsets)
    write_json(path, with_position(encode_offsets(offsets), position), path.with_suffix(".tmp"))
    holder.written(position)


def flushed_once(tmp_path: Path) -> tuple[Path, PositionHolder]:
    """A holder handed "0/10" and flushed once with offsets, and its file."""
    path, holder = tmp_path / "offsets.json", PositionHolder()
    holder.hold("0/10")
    flush(holder, path, OFFSETS)
    return path, holder


def test_a_held_position_is_written_with_the_next_flush(tmp_path: Path) -> None:
    path, _ = flushed_once(tmp_path)
    assert read_position(read_json(path)) == "0/10"


def test_a_flush_without_a_new_position_writes_the_stored_one_again(tmp_path: Path) -> None:
    path, holder = flushed_once(tmp_path)
    flush(holder, path, {**OFFSETS, TopicPartition("p.public.t", 1): 3})
    assert read_position(read_json(path)) == "0/10"
    holder.hold("0/20")
    flush(holder, path, OFFSETS)
    assert read_position(read_json(path)) == "0/20"


def test_no_position_is_written_without_offsets(tmp_path: Path) -> None:
    path, holder = tmp_path / "offsets.json", PositionHolder()
    holder.hold("0/10")
    flush(holder, path, {})
    assert read_json(path) == {}
    flush(holder, path, OFFSETS)  # the held one went with the empty write
    assert read_position(read_json(path)) is None


def test_the_stored_position_is_loaded_and_a_held_one_forgotten(tmp_path: Path) -> None:
    path, holder = tmp_path / "offsets.json", PositionHolder()
    write_json(path, {**encode_offsets(OFFSETS), POSITION_FIELD: "0/30"}, tmp_path / "t")
    holder.hold("0/40")  # handed for writes the file does not hold
    holder.load(read_json(path))
    assert holder.to_write(OFFSETS) == "0/30"
    holder.load(None)  # no file yet
    assert holder.to_write(OFFSETS) is None


def test_a_position_not_written_stays_held() -> None:
    holder = PositionHolder()
    holder.load({**encode_offsets(OFFSETS), POSITION_FIELD: "0/30"})
    holder.hold("0/40")
    assert holder.to_write(OFFSETS) == "0/40"  # a write that failed: written() not called
    assert holder.to_write(OFFSETS) == "0/40"


def test_clear_forgets_the_stored_and_the_held_position(tmp_path: Path) -> None:
    path, holder = tmp_path / "offsets.json", PositionHolder()
    holder.load({**encode_offsets(OFFSETS), POSITION_FIELD: "0/30"})
    holder.hold("0/40")
    holder.clear()
    flush(holder, path, OFFSETS)
    assert read_json(path) == encode_offsets(OFFSETS)
