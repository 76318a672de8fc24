"""No import cycle between modules, and the core's packages layered as its folders say.

Every module of ``cdc``, ``connectors``, ``sinks`` and ``snapshots`` is parsed (not imported), and
every import counts, as in ``test_import_order``: top level, inside a function, under
``TYPE_CHECKING``. A lazy or type-only import that closes a cycle only hides it, so none may.
``from P import name`` is an edge to ``P.name`` when that is a module, else to ``P``; a native
extension (``_native``) imports nothing of ours and is a leaf.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.unit.test_import_order import ALLOWED, ROOT, _imported, _package_of

#: Package edges the core's layering forbids (``importer -> imported`` prefixes): the CLI is on
#: top and nothing imports it; the log and the metrics sit under the runtime; the support
#: modules use nothing of the core but its error classes (``cdc.contracts.errors``).
FORBIDDEN: tuple[tuple[str, str], ...] = (
    ("cdc.contracts", "cdc.cli"),
    ("cdc.envelope", "cdc.cli"),
    ("cdc.records", "cdc.cli"),
    ("cdc.config", "cdc.cli"),
    ("cdc.transforms", "cdc.cli"),
    ("cdc.support", "cdc.cli"),
    ("cdc.log", "cdc.cli"),
    ("cdc.metrics", "cdc.cli"),
    ("cdc.runtime", "cdc.cli"),
    ("connectors", "cdc.cli"),
    ("sinks", "cdc.cli"),
    ("snapshots", "cdc.cli"),
    ("cdc.log", "cdc.runtime"),
    ("cdc.metrics", "cdc.runtime"),
    *(
        ("cdc.support", f"cdc.{package}")
        for package in ("envelope", "records", "config", "transforms", "log", "metrics", "runtime")
    ),
    ("cdc.support", "cdc.contracts.events"),
    ("cdc.support", "cdc.contracts.source"),
    ("cdc.support", "cdc.contracts.sink"),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(sources: Mapping[str, tuple[Path, str]]) -> dict[str, dict[str, int]]:
    """``module -> {imported module: line}`` over ``sources`` (``module -> (path, text)``)."""
    known = set(sources)
    graph: dict[str, dict[str, int]] = {name: {} for name in sources}
    for name, (path, text) in sources.items():
        package = _package_of(path)
        for node in ast.walk(ast.parse(text, str(path))):
            targets = list(_imported(node, package))
            if isinstance(node, ast.ImportFrom) and targets:
                targets = [f"{targets[0]}.{a.name}" for a in node.names] or targets
            for target in targets:
                resolved = _resolve(target, known)
                if resolved is not None and resolved != name:
                    graph[name].setdefault(resolved, getattr(node, "lineno", 0))
    return graph


def _resolve(target: str, known: set[str]) -> str | None:
    """The longest known module ``target`` names (``None``: not ours, or a native leaf)."""
    while target:
        if target in known:
            return target
        if target.rpartition(".")[2] == "_native":
            return None
        target = target.rpartition(".")[0]
    return None


def cycles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, {})))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _describe(component: Iterable[str], graph: Mapping[str, Mapping[str, int]]) -> str:
    members = set(component)
    return "; ".join(
        f"{m}:{line} -> {t}"
        for m in sorted(members)
        for t, line in graph[m].items()
        if t in members
    )


def _repository() -> dict[str, tuple[Path, str]]:
    paths = sorted(p for name in ALLOWED for p in (ROOT / name).rglob("*.py"))
    return {module_name(p): (p, p.read_text()) for p in paths}


def test_no_module_imports_itself_back() -> None:
    graph = import_graph(_repository())
    found = [_describe(c, graph) for c in cycles(graph)]
    assert not found, "import cycles (move the shared name to a leaf module):\n" + "\n".join(found)


def test_the_core_is_layered_as_its_folders() -> None:
    graph = import_graph(_repository())
    against = [
        f"{m}:{line} -> {t}"
        for m, targets in graph.items()
        for t, line in targets.items()
        for importer, imported in FORBIDDEN
        if _within(m, importer) and _within(t, imported) and not _within(t, importer)
    ]
    assert not against, "imports against the core's layers:\n" + "\n".join(sorted(against))


def _within(module: str, package: str) -> bool:
    """``module`` is ``package`` or inside it (``cdc.cli.main``, not ``cdc.client``)."""
    return module == package or module.startswith(package + ".")


def test_within_matches_dotted_prefixes_only() -> None:
    assert _within("cdc.cli", "cdc.cli") and _within("cdc.cli.verify.report", "cdc.cli")
    assert not _within("cdc.client", "cdc.cli") and not _within("cdc", "cdc.cli")


def test_a_cycle_through_a_lazy_or_type_only_import_is_found() -> None:
    sources = {
        "cdc.a": (ROOT / "cdc" / "a.py", "from cdc.b import B\n"),
        "cdc.b": (
            ROOT / "cdc" / "b.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cdc import c\n",
        ),
        "cdc.c": (ROOT / "cdc" / "c.py", "def late():\n    from cdc.a import A\n"),
        "cdc.d": (ROOT / "cdc" / "d.py", "from cdc import a\nfrom cdc.log import _native\n"),
        "cdc.log": (ROOT / "cdc" / "log" / "__init__.py", ""),
    }
    graph = import_graph(sources)
    assert graph["cdc.d"] == {"cdc.a": 1}  # the native extension is a leaf
    assert cycles(graph) == [["cdc.a", "cdc.b", "cdc.c"]]
    assert _describe(["cdc.a", "cdc.b", "cdc.c"], graph) == (
        "cdc.a:1 -> cdc.b; cdc.b:3 -> cdc.c; cdc.c:2 -> cdc.a"
    )


def test_the_graph_sees_the_repository() -> None:
    # A graph with no modules or no edges would pass the tests above vacuously.
    graph = import_graph(_repository())
    assert len(graph) > 200
    assert "cdc.contracts.events" in graph["cdc.envelope.encode"]
    assert "connectors.postgres.assembly.assembler" in graph["connectors.postgres.replication.wal"]
