"""A view's working state on local disk: one SQLite database per view, memory bounded by its
page cache, whatever the size of the tables it joins.

It holds each contributing table's current rows with their positions, and the join values of
the rows in both directions (an embedded table's join value -> its keys, to build a document;
the root's join value -> root keys, to know which documents a changed row touches). The keys a
batch touched go to a table too, read back in pieces, so a customer with 100k orders is never a
list in memory.

It is a cache of the compacted state topic, not a source of truth: it records the *commit
token* of the last batch it holds (a random id each batch also writes into the view's counters
record on the state topic, the last record of its partition) and the view's fingerprint. At a
start (:meth:`ViewStore.matches`) a store whose token is not the topic's last, or that was built
for another definition of the view, is rebuilt from the topic. A batch's changes are committed
here only after the log transaction committed: a crash between the two leaves a store one
token behind the topic, which the next start sees and rebuilds.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from cdc.config.views import POSITIONS_FIELD, ViewConfig
from cdc.contracts.errors import CdcError, Retriable
from cdc.views.join import Key, Pos, Row, build_document, canonical_key, join_value

#: Bumped when the tables below change: an older store is then rebuilt, not misread.
FORMAT = "1"
#: SQLite's page cache, KiB: the store's memory, whatever the tables' size.
CACHE_KIB = 8192
#: Keys read back at once from the touched table (documents built and appended per piece).
PIECE = 256
_CHILD, _ROOT = 0, 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS rows (
    t INTEGER NOT NULL, k BLOB NOT NULL, row BLOB NOT NULL, pos BLOB NOT NULL,
    PRIMARY KEY (t, k)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS joins (
    e INTEGER NOT NULL, side INTEGER NOT NULL, v BLOB NOT NULL, k BLOB NOT NULL,
    PRIMARY KEY (e, side, v, k)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS touched (k BLOB PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS floors (t INTEGER PRIMARY KEY, pos BLOB NOT NULL);
"""

#: A row as a source reads it back: its key's columns and the row.
SourceRow = tuple[Mapping[str, Any], dict[str, Any]]


def fingerprint(view: ViewConfig) -> str:
    """The view's definition as the store was built for it (a changed ``on`` rebuilds)."""
    body = FORMAT.encode() + view.model_dump_json(by_alias=True).encode()
    return hashlib.sha256(body).hexdigest()


class ViewStoreLocked(CdcError, Retriable):
    """Another process holds the view's store locked (an operator's ``sqlite3`` shell, a
    backup; SQLite's ``database is locked``, at once or after its busy timeout): the view
    retries its session, as the runtime retries a locked embedded log (``LogUnavailable``)."""


#: SQLite's primary result codes of a lock (extended codes carry them in their low byte).
_LOCKED = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


@contextlib.contextmanager
def lock_retriable(path: Path | str) -> Iterator[None]:
    """Raise a lock on the store at ``path`` as :class:`ViewStoreLocked`; any other SQLite
    error (a full or read-only disk, corruption) stays fatal, unchanged."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in _LOCKED:
            raise
        raise ViewStoreLocked(f"view store {path}: {exc}") from exc


class ViewStore:
    """The view's rows and join indexes in ``path`` (created when missing).

    Writes go into one open SQLite transaction (:meth:`begin`) until :meth:`commit` or
    :meth:`rollback`; reads in between see them.
    """

    def __init__(self, path: Path | str, view: ViewConfig) -> None:
        self.view = view
        self.path = path
        self._tables = {name: n for n, name in enumerate(view.inputs())}
        self._parent = [e.parent_columns() for e in view.embed]
        self._child = [e.child_columns() for e in view.embed]
        self._conn = self._connect()
        self._floors = self._read_floors()

    def _connect(self) -> sqlite3.Connection:
        if str(self.path) != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        # A cache: a commit lost with the machine is a store behind the topic, rebuilt.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        conn.execute("PRAGMA temp_store=FILE")
        conn.executescript(_SCHEMA)
        return conn

    def close(self) -> None:
        self._conn.close()

    # -- whether it matches the state topic ----------------------------------------------------

    def _meta(self, name: str) -> Any:
        row = self._conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else orjson.loads(row[0])

    def matches(self, token: str | None) -> bool:
        """Whether the store holds this view's state up to the batch whose commit token is
        ``token`` (the state topic's last; ``None``: the topic has none, nothing to match)."""
        if token is None or self._meta("fingerprint") != fingerprint(self.view):
            return False
        return bool(self._meta("token") == token)

    def counters(self) -> tuple[Pos | None, int]:
        """The view's high-water position and its documents' sequence, as last committed."""
        counters = self._meta("counters")
        if counters is None or counters["high"] is None:
            return None, 0
        return tuple(counters["high"]), int(counters["seq"])

    def reset(self) -> None:
        """Start again empty (the database's files removed: faster than deleting rows)."""
        self._conn.close()
        if str(self.path) != ":memory:":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self._conn = self._connect()
        self._floors = self._read_floors()

    # -- transactions ----------------------------------------------------------------------------

    def begin(self) -> None:
        # IMMEDIATE: the write lock is taken now, so a store another process holds locked
        # fails here, before the batch reaches the log; a deferred BEGIN met the lock at the
        # first write, which may be the commit's, after the log's commit (a needless rebuild).
        self._conn.execute("BEGIN IMMEDIATE")

    def commit(self, token: str | None, high: Pos | None, seq: int) -> None:
        """Commit the open transaction as the state up to the batch whose commit token is
        ``token``."""
        counters = {"high": None if high is None else list(high), "seq": seq}
        self._put_meta("counters", counters)
        self._put_meta("fingerprint", fingerprint(self.view))
        self._put_meta("token", token)
        self._conn.execute("DELETE FROM touched")
        self._conn.execute("COMMIT")

    def rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")
        self._floors = self._read_floors()  # a truncate's floor may have been rolled back

    def _put_meta(self, name: str, value: Any) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, orjson.dumps(value))
        )

    # -- rows ------------------------------------------------------------------------------------

    def _get(self, t: int, key: Key) -> Row | None:
        found = self._conn.execute("SELECT row, pos FROM rows WHERE t = ? AND k = ?", (t, key))
        row = found.fetchone()
        return None if row is None else _row(*row)

    def apply(self, table: str, key: Key, row: dict[str, Any] | None, pos: Pos) -> bool:
        """Apply one change (``row`` ``None``: deleted) and mark the root keys whose documents
        it touched; ``False`` when it changed nothing: a change not newer than the row's
        stored one (a replay), or the delete of a row not held."""
        t = self._tables[table]
        floor = self._floors.get(t)
        if floor is not None and tuple(pos) <= floor:
            return False  # removed by a later truncate (read first, from another partition)
        old = self._get(t, key)
        if old is not None and tuple(pos) <= tuple(old.pos):
            return False
        if old is None and row is None:
            return False
        self._put(table, key, None if old is None else old.row, row, pos, touch=True)
        return True

    def load(self, table: str, key: Key, row: dict[str, Any] | None, pos: Pos) -> None:
        """Store a row as the state topic recorded it (rebuilding: in the topic's order, the
        last record of a key wins), touching no document."""
        if table not in self._tables:
            return
        old = self._get(self._tables[table], key)
        if old is None and row is None:
            return
        self._put(table, key, None if old is None else old.row, row, pos, touch=False)

    # -- truncates -------------------------------------------------------------------------------

    def _read_floors(self) -> dict[int, Pos]:
        found = self._conn.execute("SELECT t, pos FROM floors")
        return {t: tuple(orjson.loads(pos)) for t, pos in found}

    def floor(self, table: str) -> Pos | None:
        """The position of the newest truncate of ``table`` applied (``None``: none)."""
        return self._floors.get(self._tables[table])

    def load_floor(self, table: str, pos: Pos) -> None:
        """Keep a truncate's position as the state topic recorded it (rebuilding)."""
        if table in self._tables:
            self._set_floor(self._tables[table], tuple(pos))

    def _set_floor(self, t: int, pos: Pos) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO floors (t, pos) VALUES (?, ?)", (t, orjson.dumps(list(pos)))
        )
        self._floors[t] = pos

    def truncate(self, table: str, pos: Pos, piece: int = PIECE) -> Iterator[list[Key]]:
        """Apply a truncate of ``table`` at ``pos``: remove each row older than it, as its
        delete would (the documents it was in touched), a ``piece`` of keys at a time, and
        yield the keys removed; run only as far as it is iterated.

        As in the sinks, the truncate's position decides, not the order changes are read in: a
        row newer than it (read first, from another partition) stays, and ``pos`` becomes the
        table's floor, below which a change read later is not applied (:meth:`apply`). A
        truncate not newer than the floor (a replay) removes nothing.
        """
        t, pos = self._tables[table], tuple(pos)
        floor = self._floors.get(t)
        if floor is not None and pos <= floor:
            return
        self._set_floor(t, pos)
        after = b""
        while True:
            # A fresh query a piece, after the last key seen: the rows are deleted as it goes,
            # which an open cursor over them would not see consistently.
            rows = self._conn.execute(
                "SELECT k, row, pos FROM rows WHERE t = ? AND k > ? ORDER BY k LIMIT ?",
                (t, after, piece),
            ).fetchall()
            if not rows:
                return
            after = rows[-1][0]
            gone = []
            for key, row, at in rows:
                if tuple(orjson.loads(at)) < pos:
                    self._put(table, key, orjson.loads(row), None, pos, touch=True)
                    gone.append(key)
            if gone:
                yield gone

    def _put(
        self,
        table: str,
        key: Key,
        old: dict[str, Any] | None,
        row: dict[str, Any] | None,
        pos: Pos,
        touch: bool,
    ) -> None:
        if touch and table == self.view.root:
            self._touch(key)
        if table == self.view.root:
            for e, columns in enumerate(self._parent):
                self._move(e, _ROOT, key, join_value(old, columns), join_value(row, columns))
        for e, embed in enumerate(self.view.embed):
            if embed.from_table != table:
                continue
            before, after = join_value(old, self._child[e]), join_value(row, self._child[e])
            self._move(e, _CHILD, key, before, after)
            if touch:
                self._touch_roots(e, before)
                if after != before:
                    self._touch_roots(e, after)
        t = self._tables[table]
        if row is None:
            self._conn.execute("DELETE FROM rows WHERE t = ? AND k = ?", (t, key))
        else:
            self._conn.execute(
                "INSERT OR REPLACE INTO rows (t, k, row, pos) VALUES (?, ?, ?, ?)",
                (t, key, orjson.dumps(row), orjson.dumps(list(pos))),
            )

    def _move(self, e: int, side: int, key: Key, old: bytes | None, new: bytes | None) -> None:
        if old == new:
            return
        if old is not None:
            self._conn.execute(
                "DELETE FROM joins WHERE e = ? AND side = ? AND v = ? AND k = ?",
                (e, side, old, key),
            )
        if new is not None:
            self._conn.execute(
                "INSERT OR IGNORE INTO joins (e, side, v, k) VALUES (?, ?, ?, ?)",
                (e, side, new, key),
            )

    def _touch(self, key: Key) -> None:
        self._conn.execute("INSERT OR IGNORE INTO touched (k) VALUES (?)", (key,))

    def _touch_roots(self, e: int, value: bytes | None) -> None:
        # In SQLite, not in Python: a customer's change may touch every one of 100k orders.
        if value is not None:
            self._conn.execute(
                "INSERT OR IGNORE INTO touched (k) "
                "SELECT k FROM joins WHERE e = ? AND side = ? AND v = ?",
                (e, _ROOT, value),
            )

    # -- documents -------------------------------------------------------------------------------

    def any_touched(self) -> bool:
        return bool(self._conn.execute("SELECT EXISTS (SELECT 1 FROM touched)").fetchone()[0])

    def touched(self, piece: int = PIECE) -> Iterator[list[tuple[Key, dict[str, Any] | None]]]:
        """The document of each key the open transaction touched (``None``: its root row is
        gone), in key order, ``piece`` at a time."""
        cursor = self._conn.execute(
            "SELECT t.k, r.row, r.pos FROM touched t "
            "LEFT JOIN rows r ON r.t = ? AND r.k = t.k ORDER BY t.k",
            (self._tables[self.view.root],),
        )
        yield from self._pieces(cursor, piece)

    def roots(
        self, wanted: Callable[[Key], bool] | None = None, piece: int = PIECE
    ) -> Iterator[list[tuple[Key, dict[str, Any] | None]]]:
        """The document of every root row ``wanted`` keeps (all: ``None``), in key order,
        ``piece`` at a time (``cdc verify``)."""
        cursor = self._conn.execute(
            "SELECT k, row, pos FROM rows WHERE t = ? ORDER BY k", (self._tables[self.view.root],)
        )
        yield from self._pieces(cursor, piece, wanted)

    def _pieces(
        self, cursor: sqlite3.Cursor, piece: int, wanted: Callable[[Key], bool] | None = None
    ) -> Iterator[list[tuple[Key, dict[str, Any] | None]]]:
        with contextlib.closing(cursor):
            while rows := cursor.fetchmany(piece):
                roots = [
                    (key, None if row is None else _row(row, pos))
                    for key, row, pos in rows
                    if wanted is None or wanted(key)
                ]
                # One query per many-embed for the whole piece; a single embed's row looked up
                # once a piece (a customer's 50 orders: one lookup).
                looked = self._many([root.row for _, root in roots if root is not None])
                yield [
                    (key, None if root is None else self._document(root, looked))
                    for key, root in roots
                ]

    def _many(self, roots: list[dict[str, Any]]) -> dict[tuple[int, bytes], list[Row]]:
        """The rows of each many-embed for the join values of ``roots``, by (embed, value)."""
        looked: dict[tuple[int, bytes], list[Row]] = {}
        for e, embed in enumerate(self.view.embed):
            if not embed.many:
                continue
            values = {join_value(row, self._parent[e]) for row in roots} - {None}
            looked.update(((e, v), []) for v in values if v is not None)
            if not values:
                continue
            marks = ", ".join("?" * len(values))  # placeholders only: values are bound
            found = self._conn.execute(
                "SELECT j.v, r.row, r.pos FROM joins j JOIN rows r ON r.t = ? AND r.k = j.k "
                f"WHERE j.e = ? AND j.side = ? AND j.v IN ({marks}) ORDER BY j.v, j.k",
                (self._tables[embed.from_table], e, _CHILD, *values),
            )
            for v, row, pos in found:
                looked[e, v].append(_row(row, pos))
        return looked

    def document(self, root_key: Key) -> dict[str, Any] | None:
        """The root row's document (:func:`cdc.views.join.build_document`); ``None`` when the
        root row is gone."""
        root = self._get(self._tables[self.view.root], root_key)
        return None if root is None else self._document(root, {})

    def _document(self, root: Row, looked: dict[tuple[int, bytes], list[Row]]) -> dict[str, Any]:
        """The document of ``root``; ``looked``: embedded rows already read, by (embed, join
        value), to which the rows read here are added."""
        found: list[list[Row]] = []
        for e, columns in enumerate(self._parent):
            value = join_value(root.row, columns)
            if value is None:
                found.append([])
                continue
            if (e, value) not in looked:
                looked[e, value] = self._embedded(e, value)
            found.append(looked[e, value])
        return build_document(self.view, root, found)

    def _embedded(self, e: int, value: bytes) -> list[Row]:
        """The rows of embed ``e`` that hold join value ``value``, in key order (the first one
        only for a single embed)."""
        embed = self.view.embed[e]
        query = (
            "SELECT r.row, r.pos FROM joins j JOIN rows r ON r.t = ? AND r.k = j.k "
            "WHERE j.e = ? AND j.side = ? AND j.v = ? ORDER BY j.k"
        )
        if not embed.many:
            query += " LIMIT 1"
        found = self._conn.execute(query, (self._tables[embed.from_table], e, _CHILD, value))
        return [_row(r, p) for r, p in found]


def _row(row: bytes, pos: bytes) -> Row:
    return Row(orjson.loads(row), tuple(orjson.loads(pos)))


def load_rows(store: ViewStore, rows_of: Callable[[str], Iterable[SourceRow]]) -> None:
    """Load whole tables (``rows_of(table)``: its ``(key, row)`` pairs, read one table at a
    time) into an empty store, committed: the source's rows, for ``cdc verify``."""
    store.begin()
    try:
        for table in store.view.inputs():
            for key, row in rows_of(table):
                store.load(table, canonical_key(key), row, (0, 0))
        store.commit(None, None, 0)
    except BaseException:
        store.rollback()
        raise


def documents(
    store: ViewStore, wanted: Callable[[Key], bool] | None = None
) -> Iterator[tuple[Key, dict[str, Any]]]:
    """Each root key's document in key order, positions left out (what ``cdc verify``
    compares); ``wanted``: a filter of the keys to build (the others are skipped)."""
    for piece in store.roots(wanted):
        for key, doc in piece:
            if doc is not None:
                doc.pop(POSITIONS_FIELD, None)
                yield key, doc


def join_rows(
    view: ViewConfig, tables: Mapping[str, Iterable[SourceRow]]
) -> dict[Key, dict[str, Any]]:
    """The view's documents of a whole set of rows, in a temporary store: the same join as
    the live view. A dict, for tests of small tables; ``cdc verify`` streams them instead."""
    with tempfile.TemporaryDirectory(prefix="cdc-view-join-") as tmp:
        store = ViewStore(Path(tmp) / "join.sqlite", view)
        try:
            load_rows(store, tables.__getitem__)
            return dict(documents(store))
        finally:
            store.close()
