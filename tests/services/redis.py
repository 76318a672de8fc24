"""Throwaway Redis servers for tests, benchmarks and the demo.

``LocalRedis`` runs Debian's ``redis-server`` on a free loopback port with its data in a temp dir.
``redis_server()`` picks ``CDC_TEST_REDIS_URL``, else a local server, else a testcontainers one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import redis as redis_client

from tests.services.common import (
    ExternalService,
    Service,
    ServiceError,
    ServiceUnavailableError,
    docker_available,
)
from tests.services.ports import LOOPBACK, free_port

ENV_URL = "CDC_TEST_REDIS_URL"


class RedisServer(Protocol):
    """What tests may rely on, whichever way the server was obtained."""

    supports_restart: bool

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...


def _ping(url: str) -> bool:
    client = redis_client.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    finally:
        client.close()


class LocalRedis(Service):
    """A private ``redis-server``.

    Without ``appendonly`` nothing is persisted: after ``stop()``/``restart()`` or ``kill()`` the
    server comes back empty (tests rely on that to simulate a cache that lost its data).

    Attributes:
        appendonly: Whether the append-only file is on (``appendfsync always``), so a restart,
            even after SIGKILL, keeps every acknowledged write.
    """

    name = "redis"

    def __init__(
        self,
        *,
        port: int | None = None,
        appendonly: bool = False,
        binary: str | os.PathLike[str] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
    ):
        """Prepares (does not start) a server.

        Args:
            port: TCP port on 127.0.0.1; a free one is picked at first start when None.
            appendonly: Turn on the append-only file.
            binary: Path of ``redis-server``; found on ``PATH`` when None.
            base_dir: Parent of the temp dir.

        Raises:
            ServiceUnavailableError: No ``redis-server`` on this machine.
        """
        found = str(binary) if binary is not None else shutil.which("redis-server")
        if found is None:
            raise ServiceUnavailableError(
                f"redis-server not found (apt-get install redis-server, or set {ENV_URL})"
            )
        super().__init__(base_dir)
        self.binary = found
        self.appendonly = appendonly
        self._port = port
        self._fixed_port = port is not None

    @property
    def port(self) -> int:
        """TCP port (fixed after the first start)."""
        if self._port is None:
            raise ServiceError("redis: not started yet, no port chosen")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://{LOOPBACK}:{self.port}/0"

    def _start(self) -> None:
        if self._port is None:
            self._port = free_port()
        conf = self.workdir / "redis.conf"
        conf.write_text(self._config())
        self._process = self._launch(
            [self.binary, str(conf)],
            log=self.workdir / "redis.log",
            ready=lambda: _ping(self.url),
            timeout=30,
        )

    def _forget_ports(self) -> bool:
        if self._fixed_port:
            return False
        self._port = None
        return True

    def _config(self) -> str:
        lines = [
            f"bind {LOOPBACK}",
            f"port {self.port}",
            f"dir {self.workdir}",
            "daemonize no",
            "protected-mode no",
            "save ''",
            "loglevel warning",
            f"appendonly {'yes' if self.appendonly else 'no'}",
            # With the AOF on, tests use it to check durability: fsync every write.
            "appendfsync always",
        ]
        return "\n".join(lines) + "\n"


class ExternalRedis(ExternalService):
    """A server given by URL (``CDC_TEST_REDIS_URL``); it cannot be stopped or restarted."""

    def __init__(self, url: str):
        """Wraps an existing server.

        Args:
            url: ``redis://`` URL.
        """
        self.url = url


class ContainerRedis(ExternalRedis):
    """Redis in a testcontainers container, for developers with a Docker engine."""

    def __init__(self) -> None:
        """Starts the container."""
        try:
            from testcontainers.community.redis import RedisContainer
        except ImportError:  # testcontainers before the "community" namespace
            from testcontainers.redis import RedisContainer

        self._container = RedisContainer("redis:7")
        self._container.start()
        host = self._container.get_container_host_ip()
        port = self._container.get_exposed_port(6379)
        super().__init__(f"redis://{host}:{port}/0")

    def close(self) -> None:
        """Removes the container."""
        self._container.stop()


def redis_server() -> RedisServer:
    """Returns a running server: ``$CDC_TEST_REDIS_URL``, else a local one, else a container.

    Raises:
        ServiceUnavailableError: None of the three is possible here.
    """
    url = os.environ.get(ENV_URL)
    if url:
        return ExternalRedis(url)
    if shutil.which("redis-server") is not None:
        local = LocalRedis()
        local.start()
        return local
    if docker_available():
        return ContainerRedis()
    raise ServiceUnavailableError(
        f"no Redis: set {ENV_URL}, install redis-server (make install), or run Docker"
    )


@contextmanager
def own_redis(appendonly: bool) -> Iterator[LocalRedis]:
    """A private server, started, for a test that stops, flushes or restarts it (the session's
    is shared). ``appendonly``: a restart keeps every acknowledged write; without it a restart
    comes back empty, as a cache that lost its data."""
    server = LocalRedis(appendonly=appendonly)
    server.start()
    try:
        yield server
    finally:
        server.close()
