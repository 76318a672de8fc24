"""Throwaway Apache Kafka 4 brokers (KRaft, one node) for tests, benchmarks and the demo.

``LocalKafka`` runs ``kafka.Kafka`` from the jars that ``tests/kafka/pom.xml`` copies from Maven
Central into ``tests/kafka/target/lib``, with the machine's Java, as a combined broker and
controller on two free loopback ports. ``kafka_server()`` picks ``CDC_TEST_KAFKA_BOOTSTRAP``,
else a local broker, else a testcontainers one.

Run one in the foreground with ``python -m tests.services.kafka`` (``make kafka``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Protocol

from confluent_kafka.admin import AdminClient

from tests.services.common import (
    ExternalService,
    Service,
    ServiceError,
    ServiceUnavailableError,
    docker_available,
)
from tests.services.jvm import ensure_jars, find_java
from tests.services.ports import LOOPBACK, free_port, port_open

ENV_BOOTSTRAP = "CDC_TEST_KAFKA_BOOTSTRAP"
ENV_LIB = "CDC_TEST_KAFKA_LIB"
NODE_ID = 1

#: Single-node settings: internal topics with one replica, no rebalance delay, a cleaner that
#: wakes often (compaction tests), a dedupe buffer that fits the 512 MiB heap.
BASE_SETTINGS: dict[str, str] = {
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "10",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # After a SIGKILL the restarted node waits out its old incarnation's session: keep it short.
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "log.cleaner.backoff.ms": "100",
    "log.cleaner.dedupe.buffer.size": "33554432",
}

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
"""


class KafkaServer(Protocol):
    """What tests may rely on, whichever way the broker was obtained."""

    supports_restart: bool

    @property
    def bootstrap_servers(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...

    def ensure_serving(self) -> None: ...


@contextlib.contextmanager
def outage(server: KafkaServer) -> Iterator[None]:
    """Stop the broker for the ``with`` block; it is started again however the block ends.

    The session's broker is shared: a test that stopped it and failed before starting it again
    left it down for every later test (each then waited out its own timeouts on ``Connection
    refused``).
    """
    server.stop()
    try:
        yield
    finally:
        server.start()


def _lists_topics(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    # Probe the socket first: librdkafka prints a line per refused connection while it retries.
    if not port_open(int(port), host):
        return False
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
    metadata = admin.list_topics(timeout=2)
    return len(metadata.brokers) > 0


def _cluster_id() -> str:
    # Kafka's Uuid.toString(): URL-safe base64 of 16 random bytes, without padding.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class LocalKafka(Service):
    """A private single-node KRaft broker run from Maven-built jars.

    Attributes:
        lib_dir: Folder of the jars on the classpath.
        log_dir: Kafka's data (``log.dirs``), kept across restarts.
        heap: JVM maximum heap, e.g. ``512m``.
    """

    name = "kafka"
    # SIGTERM runs a controlled shutdown (log flushed, no recovery at the next start): give it
    # time before the SIGKILL fallback.
    stop_timeout = 60.0

    def __init__(
        self,
        *,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
        heap: str = "512m",
        base_dir: str | os.PathLike[str] | None = None,
    ):
        """Prepares (does not start) a broker; builds the jars with Maven if they are missing.

        Args:
            port: Broker (PLAINTEXT) port on 127.0.0.1; free when None. The controller listener
                always gets a free port.
            settings: Extra ``server.properties`` entries, overriding the defaults.
            heap: JVM ``-Xmx``.
            base_dir: Parent of the temp dir.

        Raises:
            ServiceUnavailableError: No Java, or no jars and no Maven.
        """
        self.lib_dir = ensure_jars("kafka", "kafka_2.13-*.jar", ENV_LIB)
        super().__init__(base_dir)
        self.java = find_java() or "java"
        self.heap = heap
        self.settings = {**BASE_SETTINGS, **(settings or {})}
        self.log_dir = self.workdir / "data"
        self.config_file = self.workdir / "server.properties"
        self.log_file = self.workdir / "kafka.log"
        self._port = port
        self._fixed_port = port is not None
        self._controller_port: int | None = None
        self._broken: str | None = None  # why the broker could not be brought back

    def ensure_serving(self) -> None:
        """Before each test: the broker serves, is brought back, or the test fails at once.

        A broker that a test stopped (and did not start again) or that died is started again
        on its port with its data, as clients expect. If that fails, this call and every later
        one raise at once with the reason, so the tests after it fail in a moment each instead
        of each waiting out its own timeouts.

        Raises:
            ServiceError: the broker is down and could not be started again.
        """
        if self._broken is not None:
            raise ServiceError(self._broken)
        process = self._process
        if self.running and process is not None and process.alive() and port_open(self.port):
            return
        try:
            self.kill()  # a process that died or stopped answering: its remains, if any
            self.start()
        except ServiceError as exc:
            self._broken = (
                f"the Kafka broker at {self.bootstrap_servers} is down and could not be "
                f"started again (log: {self.log_file}); every test that needs it fails: {exc}"
            )
            raise ServiceError(self._broken) from None

    @property
    def port(self) -> int:
        """Broker port (fixed after the first start, so restarts keep clients' addresses)."""
        if self._port is None:
            raise ServiceError("kafka: not started yet, no port chosen")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"{LOOPBACK}:{self.port}"

    def _start(self) -> None:
        if not self.config_file.exists():
            self._port = self._port or free_port()
            self._controller_port = free_port()
            self.config_file.write_text(self._server_properties())
            (self.workdir / "log4j2.properties").write_text(LOG4J2)
            self._java("kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c")
        self._process = self._launch(
            self._java_argv("kafka.Kafka"),
            log=self.log_file,
            ready=lambda: _lists_topics(self.bootstrap_servers),
            timeout=120,
            interval=0.25,
        )

    def _forget_ports(self) -> bool:
        # The first start failed, most likely on a port taken meanwhile: format afresh on new
        # ports (the storage holds no data yet).
        if self._fixed_port:
            return False
        self._port = None
        self.config_file.unlink(missing_ok=True)
        shutil.rmtree(self.log_dir, ignore_errors=True)
        return True

    def _server_properties(self) -> str:
        broker = f"{LOOPBACK}:{self.port}"
        controller = f"{LOOPBACK}:{self._controller_port}"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@{controller}",
            "listeners": f"PLAINTEXT://{broker},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{broker}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            **self.settings,
        }
        return "".join(f"{key}={value}\n" for key, value in props.items())

    def _java_argv(self, main: str, *args: str) -> list[str]:
        return [
            self.java,
            f"-Xmx{self.heap}",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.workdir}",
            "-cp",
            f"{self.lib_dir}/*",
            main,
            *args,
            str(self.config_file),
        ]

    def _java(self, main: str, *args: str) -> None:
        argv = self._java_argv(main, *args)
        proc = subprocess.run(
            argv, cwd=self.workdir, capture_output=True, text=True, timeout=300, check=False
        )
        if proc.returncode != 0:
            raise ServiceError(f"{main} {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")


class ExternalKafka(ExternalService):
    """A broker given by address (``CDC_TEST_KAFKA_BOOTSTRAP``); it cannot be restarted."""

    def __init__(self, bootstrap_servers: str):
        """Wraps an existing broker.

        Args:
            bootstrap_servers: ``host:port[,host:port...]``.
        """
        self.bootstrap_servers = bootstrap_servers

    def ensure_serving(self) -> None:
        """Before each test: the first bootstrap address accepts connections.

        Raises:
            ServiceError: it does not; the broker is not ours to start.
        """
        host, _, port = self.bootstrap_servers.split(",")[0].rpartition(":")
        if not port_open(int(port), host):
            raise ServiceError(f"the Kafka broker at {self.bootstrap_servers} does not answer")


class ContainerKafka(ExternalKafka):
    """Kafka in a testcontainers container (KRaft), for developers with a Docker engine."""

    def __init__(self) -> None:
        """Starts the container."""
        try:
            from testcontainers.community.kafka import KafkaContainer
        except ImportError:  # testcontainers before the "community" namespace
            from testcontainers.kafka import KafkaContainer

        self._container = KafkaContainer("confluentinc/cp-kafka:7.6.0").with_kraft()
        self._container.start()
        super().__init__(self._container.get_bootstrap_server())

    def close(self) -> None:
        """Removes the container."""
        self._container.stop()


def kafka_server() -> KafkaServer:
    """Returns a running broker: ``$CDC_TEST_KAFKA_BOOTSTRAP``, else local, else a container.

    Raises:
        ServiceUnavailableError: None of the three is possible here.
    """
    bootstrap = os.environ.get(ENV_BOOTSTRAP)
    if bootstrap:
        return ExternalKafka(bootstrap)
    try:
        local = LocalKafka()
    except ServiceUnavailableError:
        if docker_available():
            return ContainerKafka()
        raise
    local.start()
    return local


def main() -> int:
    """Runs a broker in the foreground until Ctrl-C (``make kafka``)."""
    with LocalKafka() as broker:
        print(f"Kafka ready: bootstrap.servers={broker.bootstrap_servers}", flush=True)
        print(f"data and log in {broker.workdir}; Ctrl-C stops and removes them", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
