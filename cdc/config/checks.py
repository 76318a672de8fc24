"""The pipeline file's checks across sections: the transforms built as a run builds them,
each sink's tables against the source's tables after routing, and no two sinks on one path."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from cdc.contracts.errors import PluginNotFound
from cdc.transforms.base import TransformConfig
from cdc.transforms.chain import TransformChain, TransformRefused, build_chain

if TYPE_CHECKING:
    from cdc.config.models import SinkConfig, SourceConfig


def built_chain(
    transforms: list[TransformConfig],
    expanded: dict[str, Any],
    source: SourceConfig | None,
    problems: list[tuple[str, str]],
) -> TransformChain | None:
    """The transforms built as a run builds them (``None`` if the file's problems prevent it);
    a plugin that refuses its settings adds a problem under its path, ``transforms[N]``."""
    raw = expanded.get("transforms")
    if source is None or len(transforms) != len(raw if isinstance(raw, list) else []):
        return None
    name = expanded.get("name")
    try:
        return build_chain(transforms, name if isinstance(name, str) else "", source.table_names)
    except TransformRefused as exc:
        problems.append((exc.path, exc.reason))
        return None
    except (ValueError, PluginNotFound) as exc:
        problems.append(("transforms", str(exc)))
        return None


def cross_checks(
    source: SourceConfig | None,
    sinks: list[SinkConfig],
    chain: TransformChain | None,
    views: frozenset[str] = frozenset(),
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    outputs = _outputs(source, chain)
    for index, sink in enumerate(sinks):
        if sink.name in seen:
            problems.append((f"sinks[{index}].name", f"sink name {sink.name!r} is used twice"))
        seen.add(sink.name)
        if source is not None and sink.tables:
            for t_index, table in enumerate(sink.tables):
                if table in views:
                    continue  # a live join view's table (cdc/config/views.py)
                problem = _sink_table_problem(table, source, outputs)
                if problem is not None:
                    problems.append((f"sinks[{index}].tables[{t_index}]", problem))
    return problems + _shared_paths(sinks)


def _shared_paths(sinks: list[SinkConfig]) -> list[tuple[str, str]]:
    """Two sinks on one ``path`` (a DuckDB file, a search or jsonl directory) break each other:
    DuckDB lets one process write a file, and each sink keeps its own offsets and tables there.
    Relative paths are the working directory's, as a run reads them."""
    problems = []
    owners: dict[str, tuple[int, str]] = {}
    for index, sink in enumerate(sinks):
        path = getattr(sink, "path", None)
        if not isinstance(path, str) or not path:
            continue
        where = os.path.normcase(os.path.abspath(os.path.expanduser(path)))
        if where in owners:
            first, name = owners[where]
            problems.append(
                (
                    f"sinks[{index}].path",
                    f"{path!r} is sink {name!r}'s path too (sinks[{first}].path): two sinks "
                    "cannot share a file or directory; give each sink its own path",
                )
            )
        else:
            owners[where] = (index, sink.name)
    return problems


def _outputs(source: SourceConfig | None, chain: TransformChain | None) -> dict[str, str]:
    """Each source table's output table (itself unless a transform routes it)."""
    if source is None:
        return {}
    return {t: (chain.table(t) if chain is not None else t) for t in source.table_names}


def _sink_table_problem(table: str, source: SourceConfig, outputs: dict[str, str]) -> str | None:
    if table in outputs.values():
        return None
    if table in outputs:
        return f"{table!r} is routed to {outputs[table]!r} by the transforms: name that table"
    if table in source.table_names:
        return None
    return f"{table!r} is not a source table"
