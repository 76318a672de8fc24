"""A throwaway single-node OpenSearch for tests and benchmarks.

No OpenSearch distribution can be downloaded here, so ``LocalOpenSearch`` runs the server's own
jars from Maven Central (``org.opensearch:opensearch`` 2.19 and the Netty 4 HTTP transport),
which ``tests/opensearch/pom.xml`` builds into ``tests/opensearch/target/lib``, in one JVM
(``OpenSearchMain.java``: a node with the transport as a classpath plugin, as OpenSearch's own
test framework does). Security is off (plain HTTP, no users); the modules of a distribution
(analysis-common, painless, ...) are absent. Data lives in a temp dir, removed at close.

``opensearch_server()`` picks ``CDC_TEST_OPENSEARCH_URL`` (a real cluster), else a local node.
"""

from __future__ import annotations

import os
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

import urllib3

from tests.services.common import ExternalService, Service, ServiceError
from tests.services.jvm import ensure_jars, find_java
from tests.services.ports import LOOPBACK, free_port, port_open

ENV_URL = "CDC_TEST_OPENSEARCH_URL"
ENV_LIB = "CDC_TEST_OPENSEARCH_LIB"
MAIN_CLASS = "cdc.tests.opensearch.OpenSearchMain"


class OpenSearchServer(Protocol):
    """What tests may rely on, whichever way the server was obtained: ``url`` never holds
    credentials (the sink's config refuses them there), ``username``/``password`` do."""

    @property
    def url(self) -> str: ...

    @property
    def username(self) -> str | None: ...

    @property
    def password(self) -> str | None: ...

    def close(self) -> None: ...


def sink_options(server: OpenSearchServer) -> dict[str, Any]:
    """The ``url``, ``username`` and ``password`` of an ``OpenSearchSinkConfig`` for
    ``server`` (no credentials: ``url`` alone)."""
    if server.username is None:
        return {"url": server.url}
    return {"url": server.url, "username": server.username, "password": server.password or ""}


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its userinfo, and the user and password it held (percent-decoded)."""
    parts = urlsplit(url.rstrip("/"))
    if parts.username is None:
        return url.rstrip("/"), None, None
    netloc = parts.netloc.rpartition("@")[2]
    bare = urlunsplit(parts._replace(netloc=netloc))
    password = unquote(parts.password) if parts.password is not None else None
    return bare, unquote(parts.username), password


def _green(url: str) -> bool:
    """The cluster answers and its (empty or not) indexes are allocated."""
    http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=1, read=5), retries=False)
    try:
        reply = http.request("GET", f"{url}/_cluster/health?wait_for_status=yellow&timeout=2s")
    except urllib3.exceptions.HTTPError:
        return False
    return reply.status == 200


class LocalOpenSearch(Service):
    """A private single OpenSearch node (its data in the service's temp dir).

    Attributes:
        lib_dir: Folder of the jars on the classpath.
        heap: JVM heap (``-Xms`` and ``-Xmx``), e.g. ``384m``.
    """

    name = "opensearch"
    username: str | None = None  # security is off: no users
    password: str | None = None

    def __init__(self, *, heap: str = "384m", base_dir: str | os.PathLike[str] | None = None):
        """Prepares (does not start) a node; builds the jars with Maven if they are missing.

        Raises:
            ServiceUnavailableError: No Java, or no jars and no Maven.
        """
        self.lib_dir = ensure_jars("opensearch", "opensearch-server-*.jar", ENV_LIB)
        super().__init__(base_dir)
        self.java = find_java() or "java"
        self.heap = heap
        self.log_file = self.workdir / "opensearch.log"
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServiceError("opensearch: not started yet, no port chosen")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{LOOPBACK}:{self.port}"

    def _start(self) -> None:
        if self._port is None:
            self._port = free_port()
        argv = [
            self.java,
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            # Start-up matters more than peak speed for a test node on two shared cores.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            "-Dlog4j2.level=WARN",
            "-cp",
            f"{self.lib_dir}/*",
            MAIN_CLASS,
            str(self.port),
            str(self.workdir / "home"),
            LOOPBACK,
        ]
        self._process = self._launch(
            argv,
            log=self.log_file,
            ready=lambda: port_open(self.port) and _green(self.url),
            timeout=120,
            interval=0.2,
        )

    def _forget_ports(self) -> bool:
        self._port = None
        return True


class ExternalOpenSearch(ExternalService):
    """A cluster given by URL (``CDC_TEST_OPENSEARCH_URL``): userinfo allowed, and taken out
    of :attr:`url` into :attr:`username` and :attr:`password`."""

    def __init__(self, url: str):
        self.url, self.username, self.password = split_userinfo(url)


def opensearch_server() -> OpenSearchServer:
    """Returns a running server: ``$CDC_TEST_OPENSEARCH_URL``, else a local node.

    Raises:
        ServiceUnavailableError: neither is possible here (no Java, no jars and no Maven).
    """
    url = os.environ.get(ENV_URL)
    if url:
        return ExternalOpenSearch(url)
    local = LocalOpenSearch()
    local.start()
    return local
