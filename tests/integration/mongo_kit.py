"""Drive a MongoSource directly into a real EmbeddedLog (see :mod:`tests.integration.source_kit`).

Where mongo-java-server (the default test server) differs from a real replica set, tests ask
:func:`is_real` (``CDC_TEST_MONGO_URI`` given) and say why in a comment:

* only collection-level ``watch()`` delivers events: :func:`scope` picks ``collection`` there;
* it keeps its oplog forever and accepts any well-formed token, so "history lost" is forced with
  an unparsable token there, and with a 1970 cluster time (before the oplog) on a real server;
* it reports no ``drop``/``rename``/``invalidate`` the way mongod does, and has no transactions.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymongo

from connectors.mongodb import MongoSource, MongoSourceConfig
from tests.integration.source_kit import SourceHarness

PIPELINE = "mgt"


def into_next_second(margin_s: float = 0.1) -> None:
    """Sleep until ``margin_s`` into the clock's next whole second.

    mongo-java-server starts a change stream at a whole second (of the clock this machine shares
    with it), so what came before the call is in an earlier second than a stream opened, or a
    change made, after it: what a fixed 1.1 s sleep gave, half a second sooner on average.
    """
    now = time.time()
    time.sleep(math.floor(now) + 1 + margin_s - now)


def is_real(server: Any) -> bool:
    """A real mongod (given by ``CDC_TEST_MONGO_URI``), not mongo-java-server."""
    return bool(getattr(server, "is_real_mongod", False))


def scope(server: Any) -> str:
    """mongo-java-server delivers events only to collection-level streams."""
    return "auto" if is_real(server) else "collection"


@contextmanager
def private_server(shared: Any) -> Iterator[Any]:
    """A server of the test's own when the shared one is mongo-java-server.

    mongo-java-server repairs each change event with a scan of its whole oplog, which it never
    trims, so a test writing tens of thousands of documents would slow every later test down.
    A real server (``CDC_TEST_MONGO_URI``) is used as it is.
    """
    if is_real(shared):
        yield shared
        return
    from tests.services.mongo import LocalMongo

    server = LocalMongo()
    server.start()
    try:
        yield server
    finally:
        server.close()


def new_db() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


class Harness(SourceHarness[MongoSource]):
    """A MongoDB source, its log, and what it emitted so far."""

    def __init__(
        self,
        uri: str,
        log_dir: Path,
        tables: Sequence[str],
        *,
        on_bad_record: str = "fail",
        snapshot: str = "never",
        **options: Any,
    ) -> None:
        super().__init__(PIPELINE, log_dir, on_bad_record, snapshot)
        self.config = MongoSourceConfig.model_validate(
            {"dsn": uri, "tables": list(tables), "snapshot": snapshot, **options}
        )

    def new_source(self) -> MongoSource:
        return MongoSource(self.config, self.context)

    def stored(self) -> dict[str, Any]:
        entry: dict[str, Any] = self.log.source_offsets().get("mongodb", {})
        return entry


@contextmanager
def harness(uri: str, log_dir: Path, tables: Sequence[str], **options: Any) -> Iterator[Harness]:
    h = Harness(uri, log_dir, tables, **options)
    try:
        yield h
    finally:
        h.close()
        h.log.close()


@contextmanager
def database(uri: str) -> Iterator[pymongo.database.Database[dict[str, Any]]]:
    """A fresh database, dropped at exit."""
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(uri)
    name = new_db()
    try:
        yield client[name]
    finally:
        client.drop_database(name)
        client.close()
