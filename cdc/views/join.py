"""A view's join state, without I/O: the current rows of each table it joins, the reverse
indexes from join values to keys, and the document of a root row built from them.

A change of any row says which root documents it touches (:meth:`ViewState.apply`); each
touched document is then built again from the state as a whole (:meth:`ViewState.document`),
so a document always reflects every contributing row's last applied change, whichever order
the tables' changes arrived in (docs/views.md, "Ordering across tables").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from cdc.config.views import POSITIONS_FIELD, ViewConfig

#: A row's key as canonical JSON bytes (sorted keys): hashable, and the same for a key however
#: its record wrote it.
Key = bytes
#: A tuple of join values as JSON bytes; ``None`` when one of them is NULL (a NULL joins
#: nothing, as in SQL).
JoinValue = bytes | None
Pos = tuple[Any, Any]


class Row(NamedTuple):
    """A table's current row and the source position of its last applied change."""

    row: dict[str, Any]
    pos: Pos


def canonical_key(key: Mapping[str, Any]) -> Key:
    return orjson.dumps(key, option=orjson.OPT_SORT_KEYS)


def join_value(row: Mapping[str, Any] | None, columns: tuple[str, ...]) -> JoinValue:
    if row is None:
        return None
    values = [row.get(c) for c in columns]
    if any(v is None for v in values):
        return None
    return orjson.dumps(values, option=orjson.OPT_SORT_KEYS)


class _Index:
    """Join value -> the keys holding it."""

    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: dict[bytes, set[Key]] = {}

    def move(self, key: Key, old: JoinValue, new: JoinValue) -> None:
        if old == new:
            return
        if old is not None:
            held = self.keys.get(old)
            if held is not None:
                held.discard(key)
                if not held:
                    del self.keys[old]
        if new is not None:
            self.keys.setdefault(new, set()).add(key)

    def get(self, value: JoinValue) -> set[Key]:
        return set() if value is None else self.keys.get(value, set())


class ViewState:
    """The rows of a view's tables and its indexes, kept as changes are applied.

    Two indexes per embed: the embedded table's join value -> its keys (to build a document),
    and the root's join value -> root keys (to know which documents a changed embedded row
    touches, e.g. customer id -> order keys, order id -> item keys).
    """

    def __init__(self, view: ViewConfig) -> None:
        self.view = view
        self.rows: dict[str, dict[Key, Row]] = {t: {} for t in view.inputs()}
        self._children = [_Index() for _ in view.embed]
        self._roots = [_Index() for _ in view.embed]

    def apply(self, table: str, key: Key, row: dict[str, Any] | None, pos: Pos) -> set[Key] | None:
        """Apply one change (``row`` ``None``: deleted); the root keys whose documents it
        touched, or ``None`` when it changed nothing: a change not newer than the row's stored
        one (a replay), or the delete of a row not held (a tombstone after its delete)."""
        rows = self.rows[table]
        old = rows.get(key)
        if old is not None and tuple(pos) <= tuple(old.pos):
            return None
        if old is None and row is None:
            return None
        touched: set[Key] = set()
        old_row = None if old is None else old.row
        if table == self.view.root:
            touched.add(key)
            for embed, index in zip(self.view.embed, self._roots, strict=True):
                columns = embed.parent_columns()
                index.move(key, join_value(old_row, columns), join_value(row, columns))
        for embed, children, roots in zip(
            self.view.embed, self._children, self._roots, strict=True
        ):
            if embed.from_table != table:
                continue
            columns = embed.child_columns()
            before, after = join_value(old_row, columns), join_value(row, columns)
            children.move(key, before, after)
            touched |= roots.get(before) | roots.get(after)
        if row is None:
            rows.pop(key, None)
        else:
            rows[key] = Row(row, tuple(pos))
        return touched

    def document(self, root_key: Key) -> dict[str, Any] | None:
        """The root row with each embed's rows in its field, and the positions of every row
        it was built from in ``_positions``; ``None`` when the root row is gone."""
        root = self.rows[self.view.root].get(root_key)
        if root is None:
            return None
        doc = dict(root.row)
        positions: dict[str, Any] = {"root": list(root.pos)}
        for embed, children in zip(self.view.embed, self._children, strict=True):
            value = join_value(root.row, embed.parent_columns())
            table = self.rows[embed.from_table]
            found = [table[k] for k in sorted(children.get(value))]
            if embed.many:
                doc[embed.field] = [r.row for r in found]
                positions[embed.field] = [list(r.pos) for r in found]
            else:
                first = found[0] if found else None
                doc[embed.field] = None if first is None else first.row
                positions[embed.field] = None if first is None else list(first.pos)
        doc[POSITIONS_FIELD] = positions
        return doc

    def restore(self, entries: Iterable[tuple[str, Key, dict[str, Any], Pos]]) -> None:
        """Load stored rows (``(table, key, row, pos)``) into an empty state."""
        for table, key, row, pos in entries:
            if table in self.rows:
                self.apply(table, key, row, pos)


def join_rows(
    view: ViewConfig, tables: Mapping[str, Iterable[tuple[Mapping[str, Any], dict[str, Any]]]]
) -> dict[Key, dict[str, Any]]:
    """The view's documents of a whole set of rows (``cdc verify`` runs it over the source's
    rows): the same join as the live view, positions left out."""
    state = ViewState(view)
    for table in view.inputs():
        for key, row in tables[table]:
            state.apply(table, canonical_key(key), row, (0, 0))
    docs = {}
    for root_key in state.rows[view.root]:
        doc = state.document(root_key)
        if doc is not None:
            doc.pop(POSITIONS_FIELD)
            docs[root_key] = doc
    return docs
