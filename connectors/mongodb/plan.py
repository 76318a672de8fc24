"""Which change streams to open for the configured collections (pure).

``auto`` opens as few streams as possible: the collection itself when one is captured, its
database with a ``$match`` on ``ns`` when all captured collections share one, else the whole
cluster with a ``$match``. A database- or cluster-wide stream reads every change of its scope
on the server but sends only the matching ones, and uses one cursor instead of many.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Collection = tuple[str, str]
_CONTROL = ["invalidate", "dropDatabase"]


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """One change stream.

    Attributes:
        id: ``db.collection``, ``db`` or ``*``: the key of its stored resume point.
        db: the database watched (``None``: the cluster).
        coll: the collection watched (``None``: a database or the cluster).
        collections: the captured collections it delivers.
    """

    id: str
    db: str | None
    coll: str | None
    collections: tuple[Collection, ...]

    def match(self) -> list[dict[str, Any]]:
        """The ``$match`` stage limiting a wide stream to its collections (empty for one)."""
        if self.coll is not None:
            return []
        if self.db is not None:
            names = [c for _, c in self.collections]
            wanted: list[dict[str, Any]] = [
                {"ns.coll": {"$in": names}},
                {"to.db": self.db, "to.coll": {"$in": names}},
            ]
        else:
            wanted = [{"ns.db": d, "ns.coll": c} for d, c in self.collections]
            wanted += [{"to.db": d, "to.coll": c} for d, c in self.collections]
        wanted.append({"operationType": {"$in": _CONTROL}})
        return [{"$match": {"$or": wanted}}]


def plan_streams(collections: Sequence[Collection], scope: str) -> list[StreamSpec]:
    """The streams covering ``collections`` for ``scope`` (see the module docstring)."""
    if scope == "auto":
        dbs = {db for db, _ in collections}
        scope = (
            "collection" if len(collections) == 1 else "database" if len(dbs) == 1 else "cluster"
        )
    if scope == "collection":
        return [StreamSpec(f"{d}.{c}", d, c, ((d, c),)) for d, c in collections]
    if scope == "database":
        by_db: dict[str, list[Collection]] = {}
        for db, coll in collections:
            by_db.setdefault(db, []).append((db, coll))
        return [StreamSpec(db, db, None, tuple(colls)) for db, colls in by_db.items()]
    return [StreamSpec("*", None, None, tuple(collections))]
