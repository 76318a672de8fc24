"""``cdc.log.offsets``: a topic's end offsets (none before it exists) and the offsets after each
partition's last record."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc.contracts.errors import LogUnavailable
from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.offsets import end_offsets, last_offsets


def test_end_offsets_of_a_topic_that_does_not_exist_yet_are_empty(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log")
    try:
        assert end_offsets(log, "p.public.none") == {}
        log.ensure_topics(["p.public.t"])
        tx = log.begin()
        tx.append([Record("p.public.t", b'{"id":1}', b"{}")])
        tx.commit()
        ends = end_offsets(log, "p.public.t")
        assert sum(ends.values()) == 1
        assert last_offsets(log, "p.public.t") == ends  # no transaction markers here
    finally:
        log.close()


class _Down:
    def end_offsets(self, topic: str) -> dict[int, int]:
        raise LogUnavailable("down")


def test_an_unavailable_log_is_not_taken_for_a_missing_topic() -> None:
    with pytest.raises(LogUnavailable):
        end_offsets(_Down(), "t")  # type: ignore[arg-type]
