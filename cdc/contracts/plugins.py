"""Find source and sink plugins through entry points, loaded when first named.

``cdc`` imports none of ``connectors``, ``sinks`` or ``snapshots``: a third-party sink is a pip
package that declares a ``cdc.sinks`` entry point (a transform: ``cdc.transforms``).
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any

from cdc.contracts.errors import PluginNotFound

SOURCE_GROUP = "cdc.sources"
SINK_GROUP = "cdc.sinks"
TRANSFORM_GROUP = "cdc.transforms"
_KINDS = {SOURCE_GROUP: "source", SINK_GROUP: "sink", TRANSFORM_GROUP: "transform"}


@cache
def available(group: str) -> tuple[str, ...]:
    """Names of the installed plugins of ``group``."""
    return tuple(sorted(ep.name for ep in entry_points(group=group)))


@cache
def load(group: str, name: str) -> Any:
    """The plugin object that entry point ``name`` of ``group`` names."""
    for ep in entry_points(group=group, name=name):
        return ep.load()
    kind = _KINDS.get(group, group)
    known = ", ".join(available(group)) or "none"
    raise PluginNotFound(f"unknown {kind} type {name!r} (installed: {known})")
