"""``cdc doctor`` for the MongoDB source: the server answers, it has change streams (a replica
set or a sharded cluster), every collection exists, and, under ``full_document: required``, each
collection records pre- and post-images; a row filter (``where``) without pre-images is a
warning (what it means: :func:`row_filters`). Nothing is changed; the DSN appears only redacted.
"""

from __future__ import annotations

import json
from typing import Any

from pymongo import MongoClient
from pymongo import errors as px

from cdc.config.pipeline import redact_url
from cdc.contracts.checks import Check, failed, passed, warned
from cdc.contracts.errors import SourceError
from cdc.support.redact import redact
from connectors.mongodb.client import connect
from connectors.mongodb.config import MongoSourceConfig

Doc = dict[str, Any]

_REPLICA_SET_FIX = (
    "start mongod with --replSet NAME and run rs.initiate() once (a single-member replica set "
    "is enough)"
)


def doctor(config: MongoSourceConfig, pipeline_name: str) -> list[Check]:
    """Every check of the MongoDB source (``pipeline_name`` names nothing on the server)."""
    dsn = config.dsn.get_secret_value()
    where = redact_url(dsn)
    try:
        client = connect(config, where)
    except SourceError as exc:
        return _unconnected(str(exc), where) + row_filters(config)
    try:
        version = _version(client)
        checks = [passed("connect", f"{where}, MongoDB {version}"), _topology(client)]
        checks += _collections(client, config, _major(version))
    except px.PyMongoError as exc:
        fix = "check the role's privileges (listCollections) and the server's health"
        return [failed("connect", f"MongoDB at {where} failed: {redact(str(exc), dsn)}", fix)]
    finally:
        client.close()
    return checks + row_filters(config)


def row_filters(config: MongoSourceConfig) -> list[Check]:
    """A check per collection with a row filter: exact with pre-images, else a warning.

    Without the document before a change, the source cannot tell whether an update's document
    matched before: an update whose document does not match now is emitted as a delete of its
    key (it may have moved out), and every delete is emitted. Sinks end up right (a delete of a
    key they never held does nothing), but the topic carries deletes of documents that never
    matched, and a move in arrives as an update.
    """
    checks = []
    for entry in config.tables:
        if entry.where is None:
            continue
        label = f"collection {entry.name}: row filter"
        if config.full_document == "required":
            checks.append(passed(label, "exact: pre-images give each change's document before"))
            continue
        detail = (
            "no pre-images (full_document: updateLookup): an update whose document does not "
            "match is emitted as a delete of its key and every delete is emitted, matched or "
            "not; sinks end up right, but the topic holds deletes of documents that never "
            "matched, and a move in arrives as an update"
        )
        fix = (
            "for exact move-in/move-out set source.full_document: required (MongoDB 6.0+, "
            "with changeStreamPreAndPostImages enabled on the collection)"
        )
        checks.append(warned(label, detail, fix))
    return checks


def _unconnected(message: str, where: str) -> list[Check]:
    if "standalone" in message:
        reached = passed("connect", f"{where} answered")
        return [
            reached,
            failed("replica set", "a standalone server: no change streams", _REPLICA_SET_FIX),
        ]
    fix = "check source.dsn, that the server is up, and the credentials"
    return [failed("connect", message, fix)]


def _version(client: MongoClient[Doc]) -> str:
    return str(client.server_info().get("version", "(unknown version)"))


def _major(version: str) -> int:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def _topology(client: MongoClient[Doc]) -> Check:
    try:
        hello = dict(client.admin.command("hello"))
    except px.OperationFailure:  # servers older than 4.4.2 (and mongo-java-server)
        hello = dict(client.admin.command("isMaster"))
    if hello.get("setName"):
        return passed("replica set", f"{hello['setName']}")
    if hello.get("msg") == "isdbgrid":
        return passed("replica set", "a sharded cluster (mongos)")
    return passed("replica set", "no replica set name, but the server has change streams")


def _collections(client: MongoClient[Doc], config: MongoSourceConfig, major: int) -> list[Check]:
    checks = []
    listed: dict[str, dict[str, Doc]] = {}
    for index, (db, coll) in enumerate(config.collections()):
        if db not in listed:  # all of them, matched here: mongo-java-server ignores a filter
            listed[db] = {str(i["name"]): dict(i) for i in client[db].list_collections()}
        found = listed[db].get(coll)
        label = f"collection {db}.{coll}"
        if found is None:
            fix = f"create it (db.createCollection), or take source.tables[{index}] out"
            checks.append(failed(label, "does not exist", fix))
            continue
        checks.append(passed(label, "exists"))
        if config.full_document == "required":
            checks.append(_images(db, coll, found.get("options", {}), major))
    return checks


def _images(db: str, coll: str, options: Doc, major: int) -> Check:
    """``full_document: required`` asks the server for the exact pre- and post-images, which
    only a collection with ``changeStreamPreAndPostImages`` enabled records (MongoDB 6.0+)."""
    label = f"collection {db}.{coll}: pre-/post-images"
    if options.get("changeStreamPreAndPostImages", {}).get("enabled"):
        return passed(label, "changeStreamPreAndPostImages enabled")
    command = (
        f"db.getSiblingDB({json.dumps(db)}).runCommand({{collMod: {json.dumps(coll)}, "
        "changeStreamPreAndPostImages: {enabled: true}})"
    )
    detail = "not recorded, and source.full_document is required: its changes would fail"
    fix = f"run in mongosh: {command}"
    if major < 6:
        fix = f"upgrade to MongoDB 6.0 or later (the first with pre-images), then {fix}"
    return failed(label, detail, fix)
