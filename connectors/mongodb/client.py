"""Connecting and the checks made before anything is read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bson.codec_options import DatetimeConversion
from pymongo import MongoClient
from pymongo import errors as px

from cdc.contracts.errors import LogError, SourceFatal
from cdc.contracts.schema import TableSchema
from cdc.log.base import Log
from cdc.runtime.schemas import SchemaCatalog
from connectors.mongodb import errors
from connectors.mongodb.config import MongoSourceConfig

Doc = dict[str, Any]


def client_for(config: MongoSourceConfig) -> MongoClient[Doc]:
    """A client; nothing is contacted until the first command.

    ``DATETIME_AUTO`` decodes dates outside Python's range as ``DatetimeMS`` instead of
    failing, so such a document still converts (as ``{"$date": {"$numberLong": ...}}``).
    """
    timeout = config.server_selection_timeout_ms
    return MongoClient(
        config.dsn.get_secret_value(),
        serverSelectionTimeoutMS=timeout,
        connectTimeoutMS=min(timeout, 10_000),
        # A read on a server that vanished without closing the connection must end (then the
        # runtime reconnects); it must also outlast a change stream's awaited getMore.
        socketTimeoutMS=max(60_000, 3 * config.max_await_ms),
        appname="cdc",
        tz_aware=True,
        datetime_conversion=DatetimeConversion.DATETIME_AUTO,
    )


def connect(config: MongoSourceConfig, where: str) -> MongoClient[Doc]:
    """A client whose server answered.

    Raises:
        SourceUnavailable: no server could be selected in ``server_selection_timeout_ms``.
        SourceFatal: bad settings or refused credentials.
    """
    try:
        client = client_for(config)
    except px.PyMongoError as exc:
        raise errors.translate(exc, where, "connecting") from exc
    try:
        hello = _hello(client)
    except px.PyMongoError as exc:
        client.close()
        raise errors.translate(exc, where, "connecting") from exc
    if hello.get("msg") != "isdbgrid" and "setName" not in hello and _says_standalone(client):
        client.close()
        raise errors.standalone_error(where)
    return client


def replica_set_or_mongos(client: MongoClient[Doc]) -> bool:
    """Whether the server says it is a replica-set member or a ``mongos``: a real server, not
    one that only has change streams (mongo-java-server, which runs a ``$match`` of its own
    making; see :func:`connectors.mongodb.filters.stream_stages`).

    Raises:
        pymongo.errors.PyMongoError: translated by the caller.
    """
    hello = _hello(client)
    return bool(hello.get("setName")) or hello.get("msg") == "isdbgrid"


def _hello(client: MongoClient[Doc]) -> Doc:
    try:
        return dict(client.admin.command("hello"))
    except px.OperationFailure:
        return dict(client.admin.command("isMaster"))  # servers older than 4.4.2, and fakes


def _says_standalone(client: MongoClient[Doc]) -> bool:
    """No replica-set name: ask the server for a change stream to be sure (mongo-java-server
    has change streams without being a replica set)."""
    try:
        client.admin.command(
            {
                "aggregate": 1,
                "pipeline": [{"$changeStream": {"allChangesForCluster": True}}],
                "cursor": {},
            }
        )
    except px.OperationFailure as exc:
        return errors.standalone(exc)
    return False


def check_collections(client: MongoClient[Doc], config: MongoSourceConfig, where: str) -> None:
    """Every configured collection exists.

    Raises:
        SourceFatal: naming each missing collection and its place in the pipeline file.
    """
    missing = []
    names: dict[str, set[str]] = {}
    try:
        for index, (db, coll) in enumerate(config.collections()):
            if db not in names:
                names[db] = set(client[db].list_collection_names())
            if coll not in names[db]:
                missing.append(f"{db}.{coll} (source.tables[{index}])")
    except px.PyMongoError as exc:
        raise errors.translate(exc, where, "listing collections") from exc
    if missing:
        raise SourceFatal(
            f"MongoDB at {where}: collection {', '.join(missing)} does not exist; create it "
            "(db.createCollection) or remove it from the pipeline's tables"
        )


def load_schemas(log: Log, pipeline: str, tables: Sequence[tuple[str, str]]) -> list[TableSchema]:
    """The schemas this pipeline already published for ``tables``.

    Nothing is waited for: the source wrote them itself, in committed transactions, so what it
    finds now is all there is (a collection whose documents were all alike has none yet).
    """
    catalog = SchemaCatalog(log, pipeline, wait_s=0, source_shapes=True)
    try:
        found = [catalog.get(db, coll) for db, coll in tables]
    except LogError:
        return []  # a first start: the schema topic is created after ``open``
    return [schema for schema in found if schema is not None]
