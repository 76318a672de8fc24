"""A view's join, without I/O: rows' keys and join values as the store indexes them, and the
document of a root row built from the rows that match it.

A change of any row says which root documents it touches (:meth:`cdc.views.store.ViewStore.apply`);
each touched document is then built again from the state as a whole (:func:`build_document`
over the store's rows), so a document always reflects every contributing row's last applied
change, whichever order the tables' changes arrived in (docs/views.md, "Ordering across tables").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def build_document(view: ViewConfig, root: Row, found: Sequence[Sequence[Row]]) -> dict[str, Any]:
    """The root row with each embed's rows (``found[i]``: embed ``i``'s matching rows, in key
    order) in its field, and the positions of every row it was built from in ``_positions``."""
    doc = dict(root.row)
    positions: dict[str, Any] = {"root": list(root.pos)}
    for embed, rows in zip(view.embed, found, strict=True):
        if embed.many:
            doc[embed.field] = [r.row for r in rows]
            positions[embed.field] = [list(r.pos) for r in rows]
        else:
            first = rows[0] if rows else None
            doc[embed.field] = None if first is None else first.row
            positions[embed.field] = None if first is None else list(first.pos)
    doc[POSITIONS_FIELD] = positions
    return doc
