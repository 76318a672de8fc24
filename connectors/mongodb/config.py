"""The ``source`` section of a pipeline file when ``type: mongodb``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from cdc.config.batch_bytes import BATCH_BYTES, BatchBytes
from cdc.config.models import SourceConfig
from cdc.transforms.filters import ColumnSelection, MaskSpec, TableEntry
from connectors.mongodb.match import QueryError, compile_query, from_extended_json

KEY = "_id"


class MongoTableEntry(TableEntry):
    """A ``source.tables`` entry as the MongoDB source takes it: ``columns`` and ``mask`` name
    top-level fields; ``where`` is a query document (:mod:`connectors.mongodb.match` lists the
    operators); ``_id``, the key, is never left out and may be masked only with ``hash``."""

    @field_validator("where")
    @classmethod
    def _query_document(cls, where: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if isinstance(where, str):
            raise ValueError(
                "is SQL text, but a MongoDB row filter is a query document (a mapping), e.g. "
                "{tenant_id: 42, deleted: {$ne: true}}"
            )
        if where is not None:
            try:
                compile_query(from_extended_json(where))
            except QueryError as exc:
                raise ValueError(str(exc)) from None
        return where

    @field_validator("columns")
    @classmethod
    def _key_kept(cls, columns: ColumnSelection | None) -> ColumnSelection | None:
        if columns is not None:
            _top_level(columns.named())
            if KEY in (columns.exclude or []):
                raise ValueError(
                    "cannot leave out _id: the record key is made of it (mask it with hash instead)"
                )
        return columns

    @field_validator("mask")
    @classmethod
    def _key_hashed(cls, mask: dict[str, MaskSpec]) -> dict[str, MaskSpec]:
        _top_level(list(mask))
        spec = mask.get(KEY)
        if spec is not None and spec.type != "hash":
            raise ValueError(
                f"masks _id with {spec.type}; the key may only be hashed (equal keys must stay "
                "equal, different ones different)"
            )
        return mask


def _top_level(names: list[str]) -> None:
    """Raises ValueError: a name is a path or an operator, not a top-level field."""
    bad = [n for n in names if "." in n or n.startswith("$") or not n]
    if bad:
        raise ValueError(f"{bad} are not top-level field names (no dots, no leading $)")


class MongoSourceConfig(SourceConfig):
    """Settings of the MongoDB source.

    Attributes:
        dsn: a ``mongodb://`` or ``mongodb+srv://`` URI of a replica set or sharded cluster; a
            secret, never logged (see ``cdc.config.pipeline.redact_url``).
        tables: ``db.collection`` of every captured collection, or an entry with its filters
            (:class:`MongoTableEntry`, :mod:`connectors.mongodb.filters`).
        full_document: ``updateLookup`` (default): an update's ``after`` is the document as it
            is when the change is read; ``required``: the exact post-image at the change (with
            ``fullDocumentBeforeChange: required`` for the pre-image; MongoDB 6.0+ with
            ``changeStreamPreAndPostImages`` enabled on each collection).
        stream_scope: ``auto`` watches one collection directly, one database with a ``$match``
            on ``ns`` when several collections share it, and the cluster when several
            databases are captured; ``collection`` opens one stream per collection (what
            mongo-java-server supports), ``database`` one per database, ``cluster`` one stream.
        snapshot_workers: collection ranges read in parallel during a snapshot.
        snapshot_batch: documents per snapshot batch (the unit of a commit and of resuming); a
            batch also stops at about ``max_batch_bytes`` of its documents' BSON.
        snapshot_range_docs: documents per ``_id`` range a snapshot plans.
        max_await_ms: how long the server holds an empty ``getMore`` of a change stream.
        server_selection_timeout_ms: how long to wait for a reachable server before the source
            reports it unavailable (and the runtime retries with backoff).
        max_batch_events: most events one poll returns.
        max_batch_bytes: about the most bytes of changes one poll returns (bytes or a size
            such as ``16MiB``; :mod:`cdc.config.batch_bytes`): a poll stops reading once its
            changes' documents reach it, always after at least one change, where
            ``max_batch_events`` would stop it too.
        idle_commit_interval_s: while no captured collection changes, how often at most the
            streams' points the server's post-batch resume tokens moved (changes elsewhere in
            the cluster, its periodic no-op writes) are stored: what a fence on the cluster
            time (``cdc wait --now``) waits for when its write is not captured.
        signal_collection: ``db.collection`` the source watches for requests (``cdc snapshot
            --table``): an inserted ``{"type": "snapshot", "table": ..., "pipeline": ...}``
            makes it re-read that collection at that point of the stream. Off when omitted.
    """

    type: Literal["mongodb"] = "mongodb"
    # The same entries, with the MongoDB source's checks (errors under source.tables[N]).
    tables: list[MongoTableEntry] = Field(min_length=1)  # type: ignore[assignment]
    dsn: SecretStr
    full_document: Literal["updateLookup", "required"] = "updateLookup"
    stream_scope: Literal["auto", "collection", "database", "cluster"] = "auto"
    snapshot_workers: int = Field(default=4, ge=1, le=64)
    snapshot_batch: int = Field(default=2000, ge=1, le=100_000)
    snapshot_range_docs: int = Field(default=20_000, ge=1)
    max_await_ms: int = Field(default=500, ge=1, le=60_000)
    server_selection_timeout_ms: int = Field(default=10_000, ge=100)
    max_batch_events: int = Field(default=5000, ge=1)
    max_batch_bytes: BatchBytes = BATCH_BYTES
    idle_commit_interval_s: float = Field(default=0.2, gt=0)
    signal_collection: str | None = None

    @field_validator("dsn")
    @classmethod
    def _dsn_scheme(cls, dsn: SecretStr) -> SecretStr:
        if not dsn.get_secret_value().startswith(("mongodb://", "mongodb+srv://")):
            raise ValueError("must be a mongodb:// or mongodb+srv:// URI")
        return dsn

    @field_validator("signal_collection")
    @classmethod
    def _signal_qualified(cls, name: str | None) -> str | None:
        if name is not None and len([p for p in name.split(".", 1) if p]) != 2:
            raise ValueError(f"{name!r} must be qualified as db.collection")
        return name

    def signal(self) -> tuple[str, str] | None:
        """``(db, collection)`` of the signal collection, if one is configured."""
        if self.signal_collection is None:
            return None
        db, _, coll = self.signal_collection.partition(".")
        return db, coll

    def watched(self) -> list[tuple[str, str]]:
        """The captured collections plus the signal collection: what the streams cover."""
        signal = self.signal()
        extra = [signal] if signal is not None and signal not in self.collections() else []
        return self.collections() + extra

    def collections(self) -> list[tuple[str, str]]:
        """``(db, collection)`` of every captured collection, in configuration order."""
        return [(t.partition(".")[0], t.partition(".")[2]) for t in self.table_names]
