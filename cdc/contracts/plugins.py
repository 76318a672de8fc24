"""Find source and sink plugins through entry points, loaded when first named.

``cdc`` imports none of ``connectors``, ``sinks`` or ``snapshots``: a third-party sink is a pip
package that declares a ``cdc.sinks`` entry point (a transform: ``cdc.transforms``).
"""

from __future__ import annotations

import importlib.util
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from cdc.contracts.errors import PluginNotFound

SOURCE_GROUP = "cdc.sources"
SINK_GROUP = "cdc.sinks"
TRANSFORM_GROUP = "cdc.transforms"
_KINDS = {SOURCE_GROUP: "source", SINK_GROUP: "sink", TRANSFORM_GROUP: "transform"}


@cache
def _installed() -> Any:
    """Every installed entry point, read once: each ``entry_points()`` reads the metadata of
    every installed distribution (30 ms and more a call, 2026-12-07), and a pipeline loads a
    plugin for its source and each sink, in every ``cdc`` process. (Python 3.11 gives its
    ``SelectableGroups``, later ones ``EntryPoints``: both ``select``.)"""
    return entry_points()


@cache
def available(group: str) -> tuple[str, ...]:
    """Names of the installed plugins of ``group``."""
    return tuple(sorted(ep.name for ep in _installed().select(group=group)))


@cache
def load(group: str, name: str) -> Any:
    """The plugin object that entry point ``name`` of ``group`` names."""
    kind = _KINDS.get(group, group)
    # Not among those read at the first load: read them again, a plugin may be new since.
    found = _installed().select(group=group, name=name) or entry_points(group=group, name=name)
    for ep in found:
        try:
            plugin = ep.load()
        except ModuleNotFoundError as exc:
            raise PluginNotFound(_missing_client(kind, ep, exc)) from exc
        _check_requires(kind, ep, plugin)
        return plugin
    known = ", ".join(available(group)) or "none"
    raise PluginNotFound(f"unknown {kind} type {name!r} (installed: {known})")


def single_writer(sink_type: str) -> bool:
    """Whether the sink plugin says its store takes one writer (``single_writer``)."""
    return bool(getattr(load(SINK_GROUP, sink_type), "single_writer", False))


def _check_requires(kind: str, ep: EntryPoint, plugin: Any) -> None:
    """A plugin that imports its client library only when it runs names it in ``requires``:
    one that is not installed is the same clear error at load (``cdc validate``) as an import
    of it at the top of the plugin's module would give, without importing it (``find_spec``
    only looks for it)."""
    for module in getattr(plugin, "requires", ()):
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError as exc:  # a dotted name whose parent package is missing
            raise PluginNotFound(_missing_client(kind, ep, exc)) from exc
        if found is None:
            missing = ModuleNotFoundError(f"No module named {module!r}", name=module)
            raise PluginNotFound(_missing_client(kind, ep, missing))


def _missing_client(kind: str, ep: EntryPoint, exc: ModuleNotFoundError) -> str:
    """The error for a plugin whose client library is not installed, with the pip command.

    An optional sink's client is an extra of the package that declares it, named as the sink
    (``pip install "cdc-connectors[iceberg]"``); a plugin without such an extra is told to
    install the missing module itself.
    """
    if exc.name and (ep.module == exc.name or ep.module.startswith(exc.name + ".")):
        return f"{kind} type {ep.name!r}: its module {ep.module!r} is missing (a broken install?)"
    dist = ep.dist
    extras = dist.metadata.get_all("Provides-Extra") or [] if dist is not None else []
    if dist is not None and ep.name in extras:
        command = f'pip install "{dist.name}[{ep.name}]"'
    else:
        command = f"pip install {exc.name}"
    missing = f"needs the {exc.name!r} module, which is not installed"
    return f"{kind} type {ep.name!r} {missing}: {command}"
