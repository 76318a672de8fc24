"""The ``source`` section of a pipeline file when ``type: mongodb``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator

from cdc.config import SourceConfig


class MongoSourceConfig(SourceConfig):
    """Settings of the MongoDB source.

    Attributes:
        dsn: a ``mongodb://`` or ``mongodb+srv://`` URI of a replica set or sharded cluster; a
            secret, never logged (see ``cdc.config.redact_url``).
        tables: ``db.collection`` of every captured collection.
        full_document: ``updateLookup`` (default): an update's ``after`` is the document as it
            is when the change is read; ``required``: the exact post-image at the change (with
            ``fullDocumentBeforeChange: required`` for the pre-image; MongoDB 6.0+ with
            ``changeStreamPreAndPostImages`` enabled on each collection).
        stream_scope: ``auto`` watches one collection directly, one database with a ``$match``
            on ``ns`` when several collections share it, and the cluster when several
            databases are captured; ``collection`` opens one stream per collection (what
            mongo-java-server supports), ``database`` one per database, ``cluster`` one stream.
        snapshot_workers: collection ranges read in parallel during a snapshot.
        snapshot_batch: documents per snapshot batch (the unit of a commit and of resuming).
        snapshot_range_docs: documents per ``_id`` range a snapshot plans.
        max_await_ms: how long the server holds an empty ``getMore`` of a change stream.
        server_selection_timeout_ms: how long to wait for a reachable server before the source
            reports it unavailable (and the runtime retries with backoff).
        max_batch_events: most events one poll returns.
        signal_collection: ``db.collection`` the source watches for requests (``cdc snapshot
            --table``): an inserted ``{"type": "snapshot", "table": ..., "pipeline": ...}``
            makes it re-read that collection at that point of the stream. Off when omitted.
    """

    type: Literal["mongodb"] = "mongodb"
    dsn: SecretStr
    full_document: Literal["updateLookup", "required"] = "updateLookup"
    stream_scope: Literal["auto", "collection", "database", "cluster"] = "auto"
    snapshot_workers: int = Field(default=4, ge=1, le=64)
    snapshot_batch: int = Field(default=2000, ge=1, le=100_000)
    snapshot_range_docs: int = Field(default=20_000, ge=1)
    max_await_ms: int = Field(default=500, ge=1, le=60_000)
    server_selection_timeout_ms: int = Field(default=10_000, ge=100)
    max_batch_events: int = Field(default=5000, ge=1)
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
