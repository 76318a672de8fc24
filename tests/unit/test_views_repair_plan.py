"""``cdc verify --repair`` and live join views: a view that differs is not repaired key by key
(its documents come from its tables' rows, not from a source table), and says so."""

from __future__ import annotations

from cdc.cli.verify.repair import plan_repairs
from cdc.config.pipeline import parse
from cdc.verify.comparison import TableComparison

FILE = """
version: 1
name: shop
source: {type: generator, tables: [public.customers, public.orders]}
views:
  - name: order_docs
    root: public.orders
    embed:
      - {field: customer, from: public.customers, on: {customer_id: id}}
"""


def test_a_differing_view_is_marked_rebuilt_from_its_tables_not_repaired() -> None:
    pipeline = parse(FILE, {})
    differs = TableComparison("views.order_docs", "shop.views.order_docs", missing=[{"id": 1}])
    differs.keys = ({b'{"id":1}'}, set(), set())
    (repair,) = plan_repairs(pipeline, [differs]).values()
    assert repair.outcome == "not repaired"
    assert repair.error == (
        "views.order_docs is a live join view: it is rebuilt from its tables, not repaired "
        "(docs/views.md, Operations)"
    )
