"""Imports run one way: ``connectors -> snapshots -> cdc`` and ``sinks -> cdc``.

Every module of the four packages is parsed (not imported), and every import in it counts: top
level, inside functions, under ``TYPE_CHECKING``, and ``importlib.import_module("...")`` with a
literal name. A lazy import inside a function is still an edge: it only hides a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: What each package may import, besides the standard library and third-party packages.
ALLOWED: dict[str, frozenset[str]] = {
    "cdc": frozenset({"cdc"}),
    "snapshots": frozenset({"snapshots", "cdc"}),
    "sinks": frozenset({"sinks", "cdc"}),
    "connectors": frozenset({"connectors", "snapshots", "cdc"}),
}


def _package_of(path: Path) -> list[str]:
    """The dotted package that holds ``path`` (for resolving relative imports)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1]  # a package's ``__init__`` and its modules alike live in the folder


def _imported(node: ast.AST, package: list[str]) -> Iterator[str]:
    """The absolute module names one ast node imports, if it is an import."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = package[: len(package) - node.level + 1] if node.level else []
        yield ".".join([*base, *([node.module] if node.module else [])])
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        yield node.args[0].value


def bad_edges(source: str, path: Path) -> list[str]:
    """``file:line: a -> b`` for every import in ``source`` against the order."""
    owner = path.relative_to(ROOT).parts[0]
    package = _package_of(path)
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        for module in _imported(node, package):
            top = module.split(".")[0]
            if top in ALLOWED and top not in ALLOWED[owner]:
                found.append((getattr(node, "lineno", 0), module))
    where = path.relative_to(ROOT)
    return [f"{where}:{line}: {owner} -> {module}" for line, module in sorted(found)]


def _modules() -> list[Path]:
    return sorted(p for name in ALLOWED for p in (ROOT / name).rglob("*.py"))


def test_every_import_runs_one_way() -> None:
    offending = [edge for p in _modules() for edge in bad_edges(p.read_text(), p)]
    assert not offending, "imports against connectors -> snapshots -> cdc, sinks -> cdc:\n" + (
        "\n".join(offending)
    )


def test_the_walk_sees_every_package() -> None:
    # A walk that found no modules, or no imports, would pass the test above vacuously.
    modules = _modules()
    assert {p.relative_to(ROOT).parts[0] for p in modules} == set(ALLOWED)
    edges = set()
    for path in modules:
        package = _package_of(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for module in _imported(node, package):
                edges.add((path.relative_to(ROOT).parts[0], module.split(".")[0]))
    assert {("connectors", "snapshots"), ("connectors", "cdc"), ("sinks", "cdc")} <= edges
    assert {("snapshots", "cdc"), ("cdc", "cdc")} <= edges


def test_a_backwards_edge_is_reported_with_its_line() -> None:
    path = ROOT / "snapshots" / "example.py"
    source = "import os\n\n\ndef late():\n    from connectors.postgres import source\n"
    assert bad_edges(source, path) == ["snapshots/example.py:5: snapshots -> connectors.postgres"]


def test_every_kind_of_import_counts() -> None:
    path = ROOT / "cdc" / "log" / "example.py"
    source = "\n".join(
        [
            "import sinks.jsonl",
            "from typing import TYPE_CHECKING",
            "if TYPE_CHECKING:",
            "    from snapshots import state",
            "import importlib",
            "importlib.import_module('connectors.mongodb')",
            "from . import base",
            "from ...sinks import x",
        ]
    )
    assert bad_edges(source, path) == [
        "cdc/log/example.py:1: cdc -> sinks.jsonl",
        "cdc/log/example.py:4: cdc -> snapshots",
        "cdc/log/example.py:6: cdc -> connectors.mongodb",
        "cdc/log/example.py:8: cdc -> sinks",
    ]
