"""Shared by the PostgreSQL type conversion tests: the captured fixture and the envelope's JSON."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from connectors.postgres.types import TypeRegistry

DATA = Path(__file__).parent / "data" / "pgoutput"


@cache
def types_fixture() -> dict[str, Any]:
    """data/pgoutput/types.json: each case's text output, the columns and the catalog rows."""
    return json.loads((DATA / "types.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def captured_registry() -> TypeRegistry:
    """A registry that knows the capture's own user types (from its catalog rows)."""
    registry = TypeRegistry()
    registry.add_rows(types_fixture()["catalog"])
    return registry


def to_json(value: Any) -> bytes:
    """What the envelope writes for a converted value."""
    return orjson.dumps(value)
