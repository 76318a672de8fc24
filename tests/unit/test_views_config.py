"""The ``views:`` section: validated with every error's YAML path (``cdc validate`` exits 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cdc.config.pipeline import parse
from cdc.contracts.errors import ConfigError

BASE = """
version: 1
name: shop
source:
  type: generator
  tables: [public.customers, public.orders, public.order_items]
sinks:
  - {name: files, type: jsonl, path: out/files, tables: [public.orders, views.order_docs]}
"""

VIEWS = """
views:
  - name: order_docs
    root: public.orders
    embed:
      - {field: customer, from: public.customers, on: {customer_id: id}}
      - {field: items, from: public.order_items, on: {id: order_id}, many: true}
"""


def problems_of(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse(text, {})
    return dict(info.value.problems)


def test_the_designs_view_parses_and_a_sink_may_name_its_table() -> None:
    pipeline = parse(BASE + VIEWS, {})
    (view,) = pipeline.views
    assert view.table == "views.order_docs"
    assert view.inputs() == ["public.orders", "public.customers", "public.order_items"]
    assert view.embed[1].many and view.embed[0].on == {"customer_id": "id"}


def test_unknown_tables_and_uncaptured_froms_are_reported_with_their_paths() -> None:
    text = BASE.replace(", public.order_items]", "]") + VIEWS.replace(
        "root: public.orders", "root: public.order"
    )
    problems = problems_of(text)
    assert "not a source table" in problems["views[0].root"]
    assert "public.order_items" in problems["views[0].embed[1].from"]
    assert len(problems) == 2


def test_shape_mistakes_each_have_their_path() -> None:
    text = BASE + (
        "views:\n"
        "  - name: Bad-Name\n    root: public.orders\n    embed:\n"
        "      - {field: customer, from: customers, on: {}}\n"
        "      - {field: _positions, frm: public.customers, on: {a: b}}\n"
        "  - {name: v2, root: public.orders, embed: []}\n"
    )
    problems = problems_of(text)
    assert set(problems) >= {
        "views[0].name",
        "views[0].embed[0].from",
        "views[0].embed[0].on",
        "views[0].embed[1].field",
        "views[0].embed[1].frm",
        "views[1].embed",
    }


def test_a_sink_naming_a_view_nobody_declared_is_an_error() -> None:
    problems = problems_of(BASE)
    assert "not a source table" in problems["sinks[0].tables[1]"]


def test_cdc_validate_exits_2_with_the_paths(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(BASE + VIEWS.replace("from: public.customers", "from: public.people"))
    result = subprocess.run(
        [sys.executable, "-m", "cdc.cli.main", "validate", str(file)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "views[0].embed[0].from" in result.stdout + result.stderr
