"""How a table's shape changed between two ``Relation`` messages, and whether rows must be re-read.

Pure functions over two :class:`~cdc.contracts.schema.TableSchema` values and the table's
``pg_attribute`` rows; no I/O (the tracker in :mod:`connectors.postgres.assembly.shapes` does that).

Why a re-snapshot is needed at all: some DDL changes the values of rows it does not touch, and
PostgreSQL writes no change for them. ``ADD COLUMN ... DEFAULT`` gives every existing row the
default (stored once in ``attmissingval``, or written by a table rewrite for a volatile default);
``RENAME COLUMN`` renames the field in every row; ``ALTER COLUMN ... TYPE`` rewrites every value
in the new type's text. Only rows changed later reach the stream, so the sinks keep the old
values (or the old field) of all the others, and ``cdc verify`` reports them forever.

**Telling a rename from a drop and an add.** pgoutput's ``Relation`` message lists the live
columns in ``attnum`` order, without the ``attnum``. ``RENAME a TO b`` and ``DROP a, ADD b`` (same
type, ``a`` the last column) give the same message. The ``attnum`` tells them apart: a rename
keeps it, an added column gets a new one, and a dropped one is never reused. So the source
looks the ``attnum`` of each column up by name in ``pg_attribute`` when the message arrives
(:func:`column_ids`) and publishes it as :attr:`cdc.contracts.schema.Column.id`; :func:`diff` pairs
the columns of two shapes by ``id`` first, then by name.

Limits, because the catalog can only be read as it is *now*, not as of the message's position
in the WAL: when the stream lags behind later DDL (a restart after a migration, a long
catch-up), a name may be gone or belong to another column by the time the message is read.
:func:`column_ids` then refuses ids that are missing or out of ``attnum`` order, and a column
keeps the id it had in the previous shape under the same name. A column whose id stays unknown
is paired by name only, so a rename then looks like a drop and an add. Every such doubt ends in
a re-snapshot (a drop needs one too), so the sinks converge whatever the pairing said; a wrong
pairing costs only the DuckDB sink's copy of the old column (it keeps a dropped column).
Defaults are judged the same way from the catalog as it is now: a volatile default dropped
again before the stream reaches the ``ADD COLUMN`` looks like no default (run ``cdc snapshot``
by hand then).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdc.contracts.schema import Column, TableSchema


@dataclass(frozen=True, slots=True)
class Attribute:
    """A ``pg_attribute`` row of a captured table, as the catalog holds it now.

    Attributes:
        has_default: ``atthasdef``: the column has a default expression.
        has_missing: ``atthasmissing``: rows written before the column was added read a stored
            value (a non-volatile ``ADD COLUMN ... DEFAULT``).
        identity: ``attidentity`` is set (``GENERATED ... AS IDENTITY`` fills existing rows).
        generated: ``attgenerated`` is set: a generated column, computed for every existing
            row when added (published from PostgreSQL 18 when stored, else in no record:
            :func:`connectors.postgres.catalog.published_column`).
    """

    attnum: int
    name: str
    dropped: bool = False
    has_default: bool = False
    has_missing: bool = False
    identity: bool = False
    generated: bool = False


@dataclass(frozen=True, slots=True)
class ShapeChange:
    """What changed between two shapes of one table (columns paired by :func:`diff`)."""

    added: tuple[Column, ...] = ()
    dropped: tuple[Column, ...] = ()
    renamed: tuple[tuple[Column, Column], ...] = ()  # (old, new)
    retyped: tuple[tuple[Column, Column], ...] = ()  # (old, new)

    @property
    def empty(self) -> bool:
        return not (self.added or self.dropped or self.renamed or self.retyped)

    def to_json(self) -> dict[str, Any]:
        """The change for a log line: only what changed."""
        out: dict[str, Any] = {}
        if self.added:
            out["added"] = [c.name for c in self.added]
        if self.dropped:
            out["dropped"] = [c.name for c in self.dropped]
        if self.renamed:
            out["renamed"] = {old.name: new.name for old, new in self.renamed}
        if self.retyped:
            out["retyped"] = {new.name: f"{old.type} -> {new.type}" for old, new in self.retyped}
        return out


def column_ids(
    names: Sequence[str], attributes: Sequence[Attribute], previous: TableSchema | None
) -> list[int | None]:
    """The ``attnum`` of each column of a ``Relation`` message (in message order).

    A name is looked up among the live attributes; the result must grow along the message,
    whose columns are in ``attnum`` order, or the catalog has moved on and the id is not
    trusted. A column left without an id keeps the one it had in ``previous`` under the same
    name, if no other column took it.
    """
    live = {a.name: a.attnum for a in attributes if not a.dropped}
    ids: list[int | None] = []
    last = 0
    for name in names:
        found = live.get(name)
        if found is not None and found > last:
            ids.append(found)
            last = found
        else:
            ids.append(None)
    if previous is None:
        return ids
    before = {c.name: c.id for c in previous.columns}
    taken = {i for i in ids if i is not None}
    for n, name in enumerate(names):
        inherited = before.get(name)
        if ids[n] is None and inherited is not None and inherited not in taken:
            ids[n] = inherited
            taken.add(inherited)
    return ids


def diff(old: TableSchema, new: TableSchema) -> ShapeChange:
    """The columns added, dropped, renamed and retyped from ``old`` to ``new``.

    Columns pair by ``id`` where both shapes know it, then by name among the rest; whatever
    stays unpaired was dropped (``old``) or added (``new``).
    """
    pairs: list[tuple[Column, Column]] = []
    left = list(old.columns)
    right = list(new.columns)
    by_id = {c.id: c for c in left if c.id is not None}
    for column in list(right):
        match = by_id.get(column.id) if column.id is not None else None
        if match is not None:
            pairs.append((match, column))
            left.remove(match)
            right.remove(column)
    by_name = {c.name: c for c in left}
    for column in list(right):
        match = by_name.pop(column.name, None)
        if match is not None:
            pairs.append((match, column))
            left.remove(match)
            right.remove(column)
    return ShapeChange(
        added=tuple(right),
        dropped=tuple(left),
        renamed=tuple((a, b) for a, b in pairs if a.name != b.name),
        retyped=tuple((a, b) for a, b in pairs if a.type != b.type),
    )


def resnapshot_reasons(change: ShapeChange, attributes: Sequence[Attribute]) -> list[str]:
    """Why the rows already in the sinks are stale after ``change``; empty: they are not.

    Existing rows are unaffected only by a nullable column added without a default (they read
    NULL), a type change that keeps every value's text (:func:`keeps_values`), and changes of
    nullability or key flags. A dropped column needs a re-snapshot too: the cache and search
    sinks hold whole rows, which keep the field until each row is written again.
    """
    current = {a.attnum: a for a in attributes if not a.dropped}
    reasons = [
        f"column {old.name!r} was renamed to {new.name!r}: rows written before carry the old name"
        for old, new in change.renamed
    ]
    reasons += [
        f"column {c.name!r} was dropped: rows written before still carry it" for c in change.dropped
    ]
    for column in change.added:
        how = _filled_by(column, current)
        if how is not None:
            reasons.append(
                f"column {column.name!r} was added {how}: existing rows hold a value PostgreSQL "
                "does not log"
            )
    reasons += [
        f"column {new.name!r} changed type from {old.type} to {new.type}: existing values are "
        "rewritten, unlogged"
        for old, new in change.retyped
        if not keeps_values(old.type, new.type)
    ]
    return reasons


def _filled_by(column: Column, current: Mapping[int, Attribute]) -> str | None:
    """How existing rows got a value for an added column; ``None``: they read NULL."""
    attribute = None if column.id is None else current.get(column.id)
    if attribute is None or attribute.name != column.name:
        return "(its default cannot be known any more: the catalog has changed since)"
    if attribute.generated:
        return "as a generated column"
    if attribute.has_missing or attribute.has_default:
        return "with a default"
    if attribute.identity:
        return "as an identity column"
    return None


_INTEGERS = ("smallint", "integer", "bigint")
_STRINGS = ("character varying", "text")
_PRECISION_TYPES = {
    "numeric",
    "timestamp without time zone",
    "timestamp with time zone",
    "time without time zone",
    "time with time zone",
    "interval",
}
_TYPE = re.compile(r"^(?P<head>[^(]*?)\s*(?:\((?P<mods>[\d,\s]*)\))?(?P<tail>[^()]*)$")


def keeps_values(old: str, new: str) -> bool:
    """Whether a type change from ``old`` to ``new`` leaves every value's text as it was.

    Conservative: integers that widen, ``varchar``/``text`` in any length (PostgreSQL refuses
    values that do not fit rather than cut them), a ``numeric`` that keeps its scale, and time
    types whose fractional precision grows or goes; the same element-wise for arrays. Anything
    else (a numeric scale, ``char(n)`` padding, ``json`` to ``jsonb``, a change of family) may
    rewrite values and is re-read.
    """
    if old.endswith("[]") and new.endswith("[]"):
        return keeps_values(old[:-2], new[:-2])
    if old.endswith("[]") or new.endswith("[]"):
        return False
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(new) >= _INTEGERS.index(old)
    a, b = _split(old), _split(new)
    if a is None or b is None:
        return False
    (family, mods), (family2, mods2) = a, b
    if family in _STRINGS and family2 in _STRINGS:
        return True
    if family != family2 or family not in _PRECISION_TYPES:
        return False
    if family == "numeric":
        return not mods2 or (len(mods) == 2 and len(mods2) == 2 and mods2[1] == mods[1])
    return not mods2 or (len(mods) == 1 and mods2[0] >= mods[0])


def _split(type_name: str) -> tuple[str, tuple[int, ...]] | None:
    """``timestamp(3) with time zone`` -> ``("timestamp with time zone", (3,))``."""
    match = _TYPE.match(type_name.strip())
    if match is None:
        return None
    family = " ".join(f"{match['head']} {match['tail']}".split())
    mods = tuple(int(m) for m in (match["mods"] or "").replace(" ", "").split(",") if m)
    return family, mods
