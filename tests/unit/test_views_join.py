"""The live join view's state in its local store: which documents a change touches, and the
documents built from the stored rows (cdc/views/join.py, cdc/views/store.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc.config.views import ViewConfig
from cdc.views.join import canonical_key
from cdc.views.store import ViewStore, join_rows

VIEW = ViewConfig.model_validate(
    {
        "name": "order_docs",
        "root": "public.orders",
        "embed": [
            {"field": "customer", "from": "public.customers", "on": {"customer_id": "id"}},
            {
                "field": "items",
                "from": "public.order_items",
                "on": {"id": "order_id"},
                "many": True,
            },
        ],
    }
)


def k(n: int) -> bytes:
    return canonical_key({"id": n})


class State:
    """The store as the view task uses it, one change at a time: the keys a change touched."""

    def __init__(self, path: Path) -> None:
        self.store = ViewStore(path, VIEW)
        self.store.begin()

    def apply(self, table: str, key: bytes, row: object, pos: tuple[int, int]) -> set[bytes] | None:
        changed = self.store.apply(table, key, row, pos)  # type: ignore[arg-type]
        touched = {key for piece in self.store.touched() for key, _ in piece}
        self.store.commit(None, None, 0)  # empties the touched keys
        self.store.begin()
        return touched if changed else None

    def document(self, key: bytes) -> dict[str, object] | None:
        return self.store.document(key)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[State]:
    opened = State(tmp_path / "view.sqlite")
    yield opened
    opened.store.rollback()
    opened.store.close()


def test_a_customer_rename_touches_each_of_their_orders_and_only_theirs(state: State) -> None:
    state.apply("public.customers", k(1), {"id": 1, "name": "Ann"}, (10, 0))
    for order, customer in ((100, 1), (101, 1), (102, 2)):
        state.apply("public.orders", k(order), {"id": order, "customer_id": customer}, (11, order))
    touched = state.apply("public.customers", k(1), {"id": 1, "name": "Anna"}, (12, 0))
    assert touched == {k(100), k(101)}
    doc = state.document(k(101))
    assert doc is not None and doc["customer"] == {"id": 1, "name": "Anna"}
    assert doc["_positions"] == {"root": [11, 101], "customer": [12, 0], "items": []}


def test_items_added_moved_and_deleted_update_their_orders(state: State) -> None:
    for order in (1, 2):
        state.apply("public.orders", k(order), {"id": order, "customer_id": None}, (1, order))
    assert state.apply("public.order_items", k(7), {"id": 7, "order_id": 1}, (2, 0)) == {k(1)}
    # Moved to another order: both documents change.
    assert state.apply("public.order_items", k(7), {"id": 7, "order_id": 2}, (3, 0)) == {k(1), k(2)}
    assert state.document(k(1))["items"] == []  # type: ignore[index]
    assert state.apply("public.order_items", k(7), None, (4, 0)) == {k(2)}
    assert state.document(k(2))["items"] == []  # type: ignore[index]
    assert state.document(k(2))["customer"] is None  # type: ignore[index]  # NULL joins nothing


def test_a_replayed_change_and_a_tombstone_after_its_delete_change_nothing(state: State) -> None:
    state.apply("public.orders", k(1), {"id": 1, "customer_id": 3}, (5, 0))
    assert state.apply("public.orders", k(1), {"id": 1, "customer_id": 4}, (5, 0)) is None
    assert state.apply("public.orders", k(1), None, (6, 0)) == {k(1)}
    assert state.document(k(1)) is None
    assert state.apply("public.orders", k(1), None, (6, 0)) is None


def test_join_rows_equals_the_live_state_whatever_the_order_of_changes(state: State) -> None:
    customers = [({"id": 1}, {"id": 1, "name": "A"})]
    orders = [({"id": 9}, {"id": 9, "customer_id": 1})]
    items = [({"id": n}, {"id": n, "order_id": 9}) for n in (3, 2)]
    docs = join_rows(
        VIEW, {"public.customers": customers, "public.orders": orders, "public.order_items": items}
    )
    live = state  # items and customer first, the order last
    for key, row in items:
        live.apply("public.order_items", canonical_key(key), row, (1, row["id"]))
    live.apply("public.customers", k(1), customers[0][1], (2, 0))
    live.apply("public.orders", k(9), orders[0][1], (3, 0))
    doc = live.document(k(9))
    assert doc is not None
    doc.pop("_positions")
    assert docs == {k(9): doc}
    assert [i["id"] for i in doc["items"]] == [2, 3]  # by key
