"""Throwaway MongoDB-protocol servers for tests, benchmarks and the demo.

No ``mongod`` can be installed here, so ``LocalMongo`` runs mongo-java-server (in-memory backend,
oplog on, so change streams work) from the jars that ``tests/mongo/pom.xml`` builds into
``tests/mongo/target/lib``. It reports MongoDB 4.4 and repairs the library's change events
(``documentKey``, ``ns``, ``updateDescription``, ``replace``; see ``ChangeStreamBackend.java``).

Known differences from a real replica set: data is in memory and lost on restart; only
collection-level ``watch()`` works (not database- or cluster-wide); no multi-document
transactions; for operators other than ``$set``/``$unset`` (``$inc``, ``$push``...)
``updatedFields`` holds the field's value at read time, not at the change. Tests that need the
real thing run against a server given by ``CDC_TEST_MONGO_URI`` and check ``is_real_mongod``.

``mongo_server()`` picks ``CDC_TEST_MONGO_URI``, else a local server, else a testcontainers one.
"""

from __future__ import annotations

import os
from typing import Protocol

import pymongo

from tests.services.common import (
    ExternalService,
    Service,
    ServiceError,
    ServiceUnavailableError,
    docker_available,
    wait_until,
)
from tests.services.jvm import ensure_jars, find_java
from tests.services.ports import LOOPBACK, free_port, port_open

ENV_URI = "CDC_TEST_MONGO_URI"
ENV_LIB = "CDC_TEST_MONGO_LIB"
MAIN_CLASS = "cdc.tests.mongo.MongoServerMain"


class MongoServer(Protocol):
    """What tests may rely on, whichever way the server was obtained."""

    supports_restart: bool
    is_real_mongod: bool

    @property
    def uri(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...


def _pings(uri: str) -> bool:
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
        uri, serverSelectionTimeoutMS=1000, connectTimeoutMS=1000
    )
    try:
        return bool(client.admin.command("ping").get("ok"))
    finally:
        client.close()


class LocalMongo(Service):
    """A private mongo-java-server (in memory: a restart starts empty).

    Attributes:
        lib_dir: Folder of the jars on the classpath.
        heap: JVM maximum heap, e.g. ``256m``.
    """

    name = "mongo"
    is_real_mongod = False

    def __init__(
        self,
        *,
        port: int | None = None,
        heap: str = "256m",
        base_dir: str | os.PathLike[str] | None = None,
    ):
        """Prepares (does not start) a server; builds the jars with Maven if they are missing.

        Args:
            port: TCP port on 127.0.0.1; a free one is picked at first start when None.
            heap: JVM ``-Xmx``.
            base_dir: Parent of the temp dir.

        Raises:
            ServiceUnavailableError: No Java, or no jars and no Maven.
        """
        self.lib_dir = ensure_jars("mongo", "mongo-server-*.jar", ENV_LIB)
        super().__init__(base_dir)
        self.java = find_java() or "java"
        self.heap = heap
        self.log_file = self.workdir / "mongo.log"
        self._port = port
        self._fixed_port = port is not None

    @property
    def port(self) -> int:
        """TCP port (fixed after the first start)."""
        if self._port is None:
            raise ServiceError("mongo: not started yet, no port chosen")
        return self._port

    @property
    def uri(self) -> str:
        """``mongodb://127.0.0.1:PORT/``."""
        return f"mongodb://{LOOPBACK}:{self.port}/"

    def _start(self) -> None:
        if self._port is None:
            self._port = free_port()
        argv = [
            self.java,
            f"-Xmx{self.heap}",
            "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            f"{self.lib_dir}/*",
            MAIN_CLASS,
            str(self.port),
            LOOPBACK,
        ]
        self._process = self._launch(
            argv,
            log=self.log_file,
            ready=lambda: port_open(self.port) and _pings(self.uri),
            timeout=60,
            interval=0.2,
        )

    def _forget_ports(self) -> bool:
        if self._fixed_port:
            return False
        self._port = None
        return True


class ExternalMongo(ExternalService):
    """A server given by URI (``CDC_TEST_MONGO_URI``), e.g. a real replica set."""

    is_real_mongod = True

    def __init__(self, uri: str):
        """Wraps an existing server.

        Args:
            uri: ``mongodb://`` URI.
        """
        self.uri = uri


class ContainerMongo(ExternalMongo):
    """A one-member MongoDB replica set in a testcontainers container (Docker engine needed).

    A plain container rather than testcontainers' MongoDbContainer: that one always enables
    authentication, and a replica set with authentication needs a key file.
    """

    def __init__(self) -> None:
        """Starts the container and initiates the replica set (change streams need one)."""
        from testcontainers.core.container import DockerContainer

        self._container = (
            DockerContainer("mongo:7")
            .with_command("--replSet rs0 --bind_ip_all")
            .with_exposed_ports(27017)
        )
        self._container.start()
        host = self._container.get_container_host_ip()
        port = int(self._container.get_exposed_port(27017))
        uri = f"mongodb://{host}:{port}/?directConnection=true"
        wait_until(lambda: _pings(uri), timeout=60, what="mongod in its container")
        client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(uri)
        try:
            client.admin.command(
                "replSetInitiate",
                {"_id": "rs0", "members": [{"_id": 0, "host": "localhost:27017"}]},
            )
            wait_until(
                lambda: bool(client.admin.command("hello").get("isWritablePrimary")),
                timeout=60,
                what="the replica set to elect a primary",
            )
        finally:
            client.close()
        super().__init__(uri)

    def close(self) -> None:
        """Removes the container."""
        self._container.stop()


def mongo_server() -> MongoServer:
    """Returns a running server: ``$CDC_TEST_MONGO_URI``, else a local one, else a container.

    Raises:
        ServiceUnavailableError: None of the three is possible here.
    """
    uri = os.environ.get(ENV_URI)
    if uri:
        return ExternalMongo(uri)
    try:
        local = LocalMongo()
    except ServiceUnavailableError:
        if docker_available():
            return ContainerMongo()
        raise
    local.start()
    return local
