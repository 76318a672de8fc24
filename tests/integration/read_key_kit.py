"""``read_key`` (``cdc trace``) of each sink plugin against its real store: the scenario every
store is given, and what each must answer for it."""

from __future__ import annotations

from typing import Any

from cdc.contracts.events import ChangeEvent, Op
from tests.integration.keyed_records import item


def scenario() -> list[ChangeEvent]:
    """Key 1 created then updated (held at position 20); key 2 created then deleted (40)."""
    return [
        item(Op.CREATE, 1, 10, name="a"),
        item(Op.UPDATE, 1, 20, name="b"),
        item(Op.CREATE, 2, 30, name="x"),
        item(Op.DELETE, 2, 40),
    ]


def check(plugin: Any, config: Any, pipeline: str, remembers_deletes: bool = True) -> None:
    """What ``plugin.read_key`` answers after :func:`scenario`."""
    found = plugin.read_key(config, "public", "items", {"id": 1}, pipeline=pipeline)
    assert found is not None
    row, position = found
    assert (row["id"], row["name"], tuple(position)) == (1, "b", (20, 0)), found
    deleted = plugin.read_key(config, "public", "items", {"id": 2}, pipeline=pipeline)
    assert deleted == ((None, (40, 0)) if remembers_deletes else None), deleted
    assert plugin.read_key(config, "public", "items", {"id": 3}, pipeline=pipeline) is None
