"""The core and the snapshot kit name no database: each source's own knowledge (PostgreSQL's
``source`` fields and start decisions, MongoDB's Extended JSON) lives with its connector and
reaches the core through its plugin. Identifiers only: what a string or a comment says (an
example, a message) is not checked.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATABASE = re.compile(r"postgres|pg_|lsn|mongo", re.IGNORECASE)
NEUTRAL = ("cdc", "snapshots")


def identifiers(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every name a module binds or reads: variables, attributes, definitions, arguments,
    keywords, imports and the modules imported from."""
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name):
            yield line, node.id
        elif isinstance(node, ast.Attribute):
            yield line, node.attr
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield line, node.name
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            yield line, node.arg
        elif isinstance(node, ast.alias):
            yield line, node.asname or node.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield line, node.module


def database_names(source: str, where: str) -> list[str]:
    tree = ast.parse(source, where)
    return [f"{where}:{line}: {name}" for line, name in identifiers(tree) if DATABASE.search(name)]


def test_the_core_and_the_kit_name_no_database() -> None:
    paths = sorted(p for top in NEUTRAL for p in (ROOT / top).rglob("*.py"))
    assert len(paths) > 100  # the walk sees the packages
    found = [hit for p in paths for hit in database_names(p.read_text(), str(p.relative_to(ROOT)))]
    assert not found, "move these to their connector:\n" + "\n".join(found)


def test_a_database_name_is_found_in_any_identifier_but_not_in_text() -> None:
    source = "\n".join(
        [
            "from connectors.mongodb import rows as decode",
            "def pg_order(last_lsn): ...",
            "x = event.source.postgres_only",
            "call(mongo=1)",
            "'''postgres, lsn and mongo in a docstring'''",
            "# pg_ in a comment",
            "message = 'an lsn in a string'",
        ]
    )
    assert sorted(database_names(source, "m.py")) == [
        "m.py:1: connectors.mongodb",
        "m.py:2: last_lsn",
        "m.py:2: pg_order",
        "m.py:3: postgres_only",
        "m.py:4: mongo",
    ]
