"""Each captured collection's filters as the MongoDB source applies them (``source.tables``).

What runs where:

* **Columns** (top-level fields): the snapshot's ``find`` projection; on a change stream, an
  exclusion ``$project`` of the fields every collection of the stream leaves out (an
  ``include`` list has no stage that is correct on every server: see :func:`stream_stages`);
  and always here, on every document, ``updateDescription`` key
  (``password_hash``, ``password_hash.x``), removed field and truncated array before anything is
  encoded. ``_id`` is always kept: it is the key.
* **Masks**: here only (the hash needs the key), on the top-level fields of ``after``,
  ``before`` and ``updatedFields``; a dotted ``updatedFields`` key into a masked field
  (``email.domain``) is dropped, as is a truncated masked array (``after`` holds the field
  masked whole). A mask reads a string field as it is and any other value as its relaxed
  Extended JSON text (:func:`mask_text`). A hashed ``_id`` makes the key ``{"_id": <hash>}``.
* **Row filter** (``where``, a query document): the snapshot's ``find`` filter; on a real
  server's change stream a ``$match`` that drops only what cannot matter (see
  :func:`stream_stages`); and here,
  the exact decision with PostgreSQL's row-filter semantics (:meth:`CollectionFilter.op`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from cdc.contracts.events import Op, Row
from cdc.transforms.filters import TableEntry
from cdc.transforms.masks import Mask, compile_mask
from connectors.mongodb import match
from connectors.mongodb.convert import to_json

Doc = dict[str, Any]
Collection = tuple[str, str]
KEY: Final = "_id"
_DATA_OPS: Final = {
    "insert": Op.CREATE,
    "update": Op.UPDATE,
    "replace": Op.UPDATE,
    "delete": Op.DELETE,
}


def mask_text(value: Any) -> str:
    """What a mask reads of a value: a string as it is, any other value as the compact JSON of
    its relaxed Extended JSON form (``42``, ``1.5``, ``true``, ``{"$oid":"65a0..."}``,
    ``{"$date":"2024-01-02T03:04:05.123Z"}``, ``["a",1]``, ``{"k":"v"}``)."""
    if isinstance(value, str):
        return value
    return orjson.dumps(to_json(value)).decode()


def top(path: str) -> str:
    """The top-level field of a dotted path (``a.b.c`` -> ``a``)."""
    return path.partition(".")[0]


@dataclass(frozen=True)
class CollectionFilter:
    """One collection's entry, its masks compiled and its row filter compiled.

    Attributes:
        entry: the ``source.tables`` entry.
        masks: top-level field -> compiled mask.
        query: the row filter with BSON values (``None``: every document).
        pre_images: the stream carries pre-images (``full_document: required``).
    """

    entry: TableEntry
    masks: Mapping[str, Mask] = field(default_factory=dict)
    query: Mapping[str, Any] | None = None
    pre_images: bool = False
    _match: match.Predicate | None = None

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def plain(self) -> bool:
        """Nothing is left out, masked or filtered."""
        return self.entry.columns is None and not self.masks and self.query is None

    @property
    def masked_key(self) -> bool:
        """``_id`` is hashed: its raw value must not be stored anywhere (resume points)."""
        return KEY in self.masks

    def keeps(self, name: str) -> bool:
        """Whether top-level field ``name`` leaves the database (``_id`` always does)."""
        return name == KEY or self.entry.keeps(name)

    def excluded(self) -> list[str]:
        """The fields the server may leave out: those an ``exclude`` list names, but for the
        ones the row filter reads (the source decides on them, then drops them)."""
        columns = self.entry.columns
        read = self.read_fields()
        return [n for n in (columns.exclude or []) if n not in read] if columns else []

    def read_fields(self) -> set[str]:
        """The top-level fields the row filter reads."""
        return match.fields(self.query) if self.query is not None else set()

    # -- the server's side --------------------------------------------------------------

    def projection(self) -> dict[str, int] | None:
        """The ``find`` projection (``None``: whole documents); it keeps the fields the row
        filter reads, which :meth:`document` then drops."""
        columns = self.entry.columns
        if columns is None:
            return None
        if columns.include is not None:
            kept = [KEY, *columns.include, *sorted(self.read_fields())]
            return {name: 1 for name in dict.fromkeys(kept)}
        return {name: 0 for name in self.excluded()} or None

    def find_filter(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """``base`` (an ``_id`` range) and the row filter, for ``find``."""
        if self.query is None:
            return dict(base)
        if not base:
            return dict(self.query)
        return {"$and": [dict(base), dict(self.query)]}

    # -- the source's side --------------------------------------------------------------

    def matches(self, doc: Mapping[str, Any] | None) -> bool:
        """Whether ``doc`` passes the row filter (``None``, no document, never does)."""
        if self._match is None:
            return doc is not None
        return doc is not None and self._match(doc)

    def op(
        self, kind: str, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None
    ) -> Op | None:
        """The operation a data change of ``kind`` becomes under the row filter, or ``None``.

        PostgreSQL's row-filter semantics: an update whose new document matches is an update,
        or a create when the old one did not ("move in"); one whose new document does not
        match is a delete when the old one did ("move out"), else nothing; a delete is kept
        when the old document matched. Without the old document (no pre-images) an update
        whose new document does not match is a delete of its key (it may have moved out), and
        every delete is kept. ``new`` is ``None`` for an update whose document is gone
        (``updateLookup``): left to the caller, which skips it.
        """
        plain = _DATA_OPS[kind]
        if self._match is None or (kind != "insert" and kind != "delete" and new is None):
            return plain
        if kind == "insert":
            return plain if self.matches(new) else None
        was = old is None or self.matches(old)
        if kind == "delete":
            return plain if was else None
        if self.matches(new):
            return Op.UPDATE if old is None or self.matches(old) else Op.CREATE
        return Op.DELETE if was else None

    def document(self, doc: Mapping[str, Any]) -> Doc:
        """``doc`` with the fields left out removed and the masked ones masked (a new dict,
        in the document's order)."""
        masks = self.masks
        out: Doc = {}
        for name, value in doc.items():
            if not self.keeps(name):
                continue
            mask = masks.get(name)
            out[name] = value if mask is None or value is None else mask(mask_text(value))
        return out

    def key(self, doc_id: Any) -> Row:
        """The record key of the document whose ``_id`` is ``doc_id``."""
        mask = self.masks.get(KEY)
        if mask is not None:
            return {KEY: mask(mask_text(doc_id))}
        return {KEY: to_json(doc_id)}

    def update_description(self, description: Mapping[str, Any]) -> Doc:
        """An ``updateDescription`` without what the filters leave out or mask."""
        out: Doc = dict(description)
        updated = description.get("updatedFields")
        if isinstance(updated, Mapping):
            out["updatedFields"] = self._updated(updated)
        removed = description.get("removedFields")
        if isinstance(removed, list):
            out["removedFields"] = [p for p in removed if self.keeps(top(str(p)))]
        truncated = description.get("truncatedArrays")
        if isinstance(truncated, list):
            out["truncatedArrays"] = [
                t for t in truncated if self._shows(top(str(t.get("field", ""))))
            ]
        out.pop("disambiguatedPaths", None)  # names paths of fields, left out ones included
        return out

    def _shows(self, name: str) -> bool:
        return self.keeps(name) and name not in self.masks

    def _updated(self, updated: Mapping[str, Any]) -> Doc:
        out: Doc = {}
        for path, value in updated.items():
            name = top(str(path))
            if not self.keeps(name):
                continue
            mask = self.masks.get(name)
            if mask is None:
                out[path] = value
            elif path == name:
                out[path] = value if value is None else mask(mask_text(value))
            # else: a path into a masked field: dropped (``after`` has the field masked whole)
        return out

    def scrub(self, change: Mapping[str, Any]) -> Doc:
        """A change event without what the filters leave out or mask (for a dead letter)."""
        out: Doc = dict(change)
        for name in ("fullDocument", "fullDocumentBeforeChange"):
            doc = change.get(name)
            if isinstance(doc, Mapping):
                out[name] = self.document(doc)
        description = change.get("updateDescription")
        if isinstance(description, Mapping):
            out["updateDescription"] = self.update_description(description)
        key = change.get("documentKey")
        if isinstance(key, Mapping) and KEY in key:
            out["documentKey"] = self.key(key[KEY])
        return out


def compile_filter(entry: TableEntry, key: bytes | None, pre_images: bool) -> CollectionFilter:
    """The filter of a validated entry (:class:`connectors.mongodb.config.MongoTableEntry`).

    Raises:
        match.QueryError: the row filter uses what the evaluator does not support (the config
            refused it already).
        ValueError, PluginNotFound: a mask cannot be compiled.
    """
    masks = {
        name: compile_mask(spec.type, n=spec.n, key=key, plugin=spec.name, options=spec.options)
        for name, spec in entry.mask.items()
    }
    query = None
    predicate = None
    if isinstance(entry.where, Mapping):
        query = match.from_extended_json(entry.where)
        predicate = match.compile_query(query)
    return CollectionFilter(entry, masks, query, pre_images, predicate)


def collection_filters(
    entries: Iterable[TableEntry], key: bytes | None, pre_images: bool
) -> dict[Collection, CollectionFilter]:
    """The filters of the entries that filter anything, by ``(db, collection)``."""
    out: dict[Collection, CollectionFilter] = {}
    for entry in entries:
        if entry.columns is not None or entry.mask or entry.where is not None:
            out[(entry.schema_name, entry.table_name)] = compile_filter(entry, key, pre_images)
    return out


# -- change stream stages -----------------------------------------------------------------------

#: The data operations a ``$match`` may drop; every other event (drop, rename, invalidate...)
#: passes.
_FILTERED_OPS: Final = ["insert", "update", "replace", "delete"]


def stream_stages(
    collections: Sequence[Collection],
    filters: Mapping[Collection, CollectionFilter],
    single: bool,
    match_on_server: bool,
) -> list[Doc]:
    """The stages after ``$changeStream`` (and the stream's own ``$match`` on ``ns``) for a
    stream delivering ``collections`` (``single``: a collection-level stream).

    Only what is correct both on a real replica set and on mongo-java-server (the test server)
    is sent. What mongo-java-server 1.47 does with stages after ``$changeStream``: it runs
    them, with its own query matcher, on its raw events, *before* the test backend repairs
    them (``ChangeStreamBackend`` then adds ``ns`` and ``updateDescription`` and, for an update
    or a replace, puts the document in ``fullDocument`` afresh). So:

    * an exclusion ``$project`` of ``fullDocument.<f>``, ``fullDocumentBeforeChange.<f>`` and
      ``updateDescription.updatedFields.<f>`` for the fields every collection of the stream
      leaves out: correct on both, as it only removes; on the fake server it reaches inserts
      only (the repair brings the fields back into updates and replaces), and the source
      removes them from every event whatever the server did;
    * a ``$match`` on the row filters, only where ``match_on_server`` (a server that says it is
      a replica set or a ``mongos``): mongo-java-server's matcher is stricter than MongoDB's in
      corner cases (``$gte: null``, arrays inside arrays, ``{"a.b": null}`` over an array of
      scalars), so there it would drop inserts the filter lets through. The ``$match`` drops
      only what cannot matter: without pre-images, inserts whose document does not match (an
      update or replace whose new document does not match must still become a delete: it may
      have moved out; a delete without a pre-image is always kept); with them, data events
      neither of whose images matches. Every other event passes, and on a database- or
      cluster-wide stream so do the events of the other collections;
    * nothing for an ``include`` selection (it would need ``$addFields`` with
      ``$objectToArray``, which mongo-java-server fails on for an event without a
      ``fullDocument``) or for masks (the hash key never leaves the source).
    """
    stages: list[Doc] = []
    filtered = [(c, filters[c]) for c in collections if c in filters and filters[c].query]
    if filtered and match_on_server:
        stages.append({"$match": _row_match(filtered, single)})
    excluded = _common_exclusions([filters.get(c) for c in collections])
    if excluded:
        paths = ("fullDocument", "fullDocumentBeforeChange", "updateDescription.updatedFields")
        stages.append({"$project": {f"{p}.{name}": 0 for name in excluded for p in paths}})
    return stages


def _row_match(filtered: list[tuple[Collection, CollectionFilter]], single: bool) -> Doc:
    pre_images = filtered[0][1].pre_images
    passing: list[Doc] = [{"operationType": {"$nin": _FILTERED_OPS if pre_images else ["insert"]}}]
    if not single:
        passing.append({"$nor": [{"ns.db": db, "ns.coll": coll} for (db, coll), _ in filtered]})
    for (db, coll), table_filter in filtered:
        assert table_filter.query is not None
        images = [match.prefixed(table_filter.query, "fullDocument")]
        if pre_images:
            images.append(match.prefixed(table_filter.query, "fullDocumentBeforeChange"))
        condition: Doc = images[0] if len(images) == 1 else {"$or": images}
        passing.append(
            condition if single else {"$and": [{"ns.db": db, "ns.coll": coll}, condition]}
        )
    return {"$or": passing}


def _common_exclusions(filters: Sequence[CollectionFilter | None]) -> list[str]:
    """The fields every one of ``filters`` leaves out (none when one of them is plain)."""
    common: list[str] | None = None
    for table_filter in filters:
        names = table_filter.excluded() if table_filter is not None else []
        common = names if common is None else [n for n in common if n in names]
    return [n for n in common or [] if n != KEY]
