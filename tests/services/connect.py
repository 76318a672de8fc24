"""A Kafka Connect standalone worker running Debezium's JDBC sink: a real Debezium consumer.

``tests/connect`` (built by ``make jars``) holds Kafka Connect 4.3's runtime, Debezium's JDBC sink
connector (``io.debezium.connector.jdbc.JdbcSinkConnector``) with Hibernate, and the PostgreSQL
driver. ``ConnectWorker`` runs one standalone worker (``ConnectStandalone``) on a broker, with the
JsonConverter and ``schemas.enable=true`` for keys and values, as a Debezium user runs it; sinks
are added and removed through the worker's REST API on a loopback port, so one worker serves a
whole test module. ``jdbc_sink_config`` builds the sink's settings for a PostgreSQL database.

The worker's consumers read ``read_committed``: our Kafka log writes in transactions, and a
consumer that read uncommitted would also apply the records of an aborted one.

Connection passwords go to the worker only through its REST API on loopback; no message of this
module prints them (log tails and REST errors have them masked).

Example::

    with ConnectWorker(kafka.bootstrap_servers) as worker:
        worker.add_sink("jdbc", jdbc_sink_config(target_dsn, topics_regex=r"shop\\.public\\..*"))
        worker.wait_running("jdbc", timeout_s=60)
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from cdc.testing import WaitTimeout, wait_until
from tests.services.common import Service, ServiceError, tail
from tests.services.jvm import ensure_jars, find_java
from tests.services.ports import LOOPBACK, free_port

__all__ = ["SINK_CLASS", "ConnectWorker", "jdbc_sink_config"]

ENV_LIB = "CDC_TEST_CONNECT_LIB"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
SINK_CLASS = "io.debezium.connector.jdbc.JdbcSinkConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"


def jdbc_sink_config(
    dsn: str, *, topics_regex: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Debezium's JDBC sink writing the topics that match ``topics_regex`` into ``dsn``.

    Upserts by the record key (a composite key becomes a composite primary key), applies deletes
    and tombstones, creates and widens tables from the records' Connect schemas, and names each
    table after the record's ``source.table`` (the default, ``${topic}``, would name it after
    the whole topic).

    Args:
        dsn: A libpq DSN or ``postgresql://`` URL of the target database.
        topics_regex: The topics to consume (a Java regex).
        extra: Settings over these.

    Returns:
        The connector's configuration, the password among it.
    """
    conn = conninfo_to_dict(dsn)
    host, port = conn.get("host", LOOPBACK), conn.get("port", "5432")
    config = {
        "connector.class": SINK_CLASS,
        "tasks.max": "1",
        "topics.regex": topics_regex,
        "connection.url": f"jdbc:postgresql://{host}:{port}/{conn.get('dbname', 'postgres')}",
        "connection.username": str(conn.get("user", "postgres")),
        "connection.password": str(conn.get("password", "")),
        "connection.pool.min_size": "1",
        "connection.pool.max_size": "2",
        "insert.mode": "upsert",
        "delete.enabled": "true",
        "primary.key.mode": "record_key",
        "schema.evolution": "basic",
        "collection.name.format": "${source.table}",
        "use.time.zone": "UTC",
    }
    return {**config, **(extra or {})}


class ConnectWorker(Service):
    """One Kafka Connect standalone worker in a child JVM, its sinks managed over REST.

    Attributes:
        lib_dir: Folder of the jars on the classpath (the plugins among them).
        log_file: The worker's stdout and stderr (Connect's, Debezium's and Hibernate's log).
    """

    name = "connect"
    stop_timeout = 30.0

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        heap: str = "512m",
        base_dir: str | os.PathLike[str] | None = None,
    ):
        """Prepares (does not start) a worker; builds the jars with Maven if they are missing.

        Args:
            bootstrap_servers: The broker the sinks consume from.
            heap: JVM ``-Xmx``.
            base_dir: Parent of the temp dir.

        Raises:
            ServiceUnavailableError: No Java, or no jars and no Maven.
            ServiceError: The jars could not be built.
        """
        self.lib_dir = ensure_jars("connect", "debezium-connector-jdbc-*.jar", ENV_LIB)
        super().__init__(base_dir)
        self.java = find_java() or "java"
        self.bootstrap_servers = bootstrap_servers
        self.heap = heap
        self.log_file = self.workdir / "connect.log"
        self.config_file = self.workdir / "worker.properties"
        self._port: int | None = None
        self._secrets: set[str] = set()

    @property
    def url(self) -> str:
        """The REST API's base URL, ``http://127.0.0.1:PORT``."""
        if self._port is None:
            raise ServiceError("connect: not started yet, no port chosen")
        return f"http://{LOOPBACK}:{self._port}"

    def _start(self) -> None:
        self._port = self._port or free_port()
        self.config_file.write_text(self._worker_properties())
        argv = [
            self.java,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            "-cp",
            f"{self.lib_dir}/*",
            MAIN_CLASS,
            str(self.config_file),
        ]
        self._process = self._launch(
            argv, log=self.log_file, ready=self._serves, timeout=120, interval=0.5
        )

    def _forget_ports(self) -> bool:
        self._port = None
        return True

    def _worker_properties(self) -> str:
        props = {
            "bootstrap.servers": self.bootstrap_servers,
            "key.converter": JSON_CONVERTER,
            "value.converter": JSON_CONVERTER,
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "offset.storage.file.filename": str(self.workdir / "offsets.dat"),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://{LOOPBACK}:{self._port}",
            # The plugins are on the classpath (no plugin.path to set up), found by their
            # ServiceLoader manifests: much faster than scanning every class of 80 jars.
            "plugin.discovery": "service_load",
            "consumer.isolation.level": "read_committed",
            "consumer.auto.offset.reset": "earliest",
            # A sink subscribed by topics.regex sees a topic created after it started only at
            # its consumer's next metadata refresh: every 5 minutes by default.
            "consumer.metadata.max.age.ms": "1000",
        }
        return "".join(f"{key}={value}\n" for key, value in props.items())

    def _serves(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/connectors", timeout=2) as response:
            return bool(response.status == 200)

    def add_sink(self, name: str, config: Mapping[str, str]) -> None:
        """Creates (or reconfigures) the connector ``name``; it starts consuming at once.

        Raises:
            ServiceError: The worker refused the configuration.
        """
        self._secrets.update(v for k, v in config.items() if "password" in k and v)
        self._request("PUT", f"/connectors/{name}/config", {**config, "name": name})

    def remove_sink(self, name: str) -> None:
        """Deletes the connector ``name`` (its committed consumer offsets stay in Kafka)."""
        self._request("DELETE", f"/connectors/{name}")

    def status(self, name: str) -> dict[str, Any]:
        """The connector's REST status: ``{"connector": {"state"}, "tasks": [{"state", ...}]}``.

        A failed part also has its Java stack trace under ``"trace"``.
        """
        status: dict[str, Any] = self._request("GET", f"/connectors/{name}/status")
        return status

    def wait_running(self, name: str, timeout_s: float) -> None:
        """Waits until the connector and each of its tasks run.

        Raises:
            ServiceError: A task failed (its stack trace is in the message), the worker exited,
                or ``timeout_s`` passed.
        """

        def running() -> dict[str, Any] | None:
            self.check_healthy(name)
            status = self._status_or_none(name)
            tasks = (status or {}).get("tasks", [])
            up = status is not None and status["connector"]["state"] == "RUNNING"
            return status if up and tasks and all(t["state"] == "RUNNING" for t in tasks) else None

        try:
            wait_until(running, timeout_s, 0.3)
        except WaitTimeout:
            status = self._status_or_none(name)
            raise ServiceError(
                f"connect: {name} not running after {timeout_s:.0f} s: {status}"
            ) from None

    def check_healthy(self, name: str) -> None:
        """Raises if the worker exited, or the connector or one of its tasks failed.

        Raises:
            ServiceError: With the failed task's trace and the end of the worker's log.
        """
        if self._process is None or not self._process.alive():
            raise ServiceError(f"connect: the worker is not running:\n{self.log_tail()}")
        status = self._status_or_none(name)
        if status is None:
            return
        parts = [status["connector"], *status.get("tasks", [])]
        failed = [part for part in parts if part.get("state") == "FAILED"]
        if failed:
            traces = "\n".join(self._mask(str(part.get("trace", ""))) for part in failed)
            raise ServiceError(f"connect: {name} failed:\n{traces}")

    def _status_or_none(self, name: str) -> dict[str, Any] | None:
        try:
            return self.status(name)
        except ServiceError as exc:
            if "404" in str(exc):  # created, not yet known to the herder
                return None
            raise

    def log_tail(self, lines: int = 80) -> str:
        """The end of the worker's log, passwords masked."""
        return self._mask(tail(self.log_file, lines))

    def _mask(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            detail = self._mask(exc.read().decode(errors="replace"))
            raise ServiceError(f"connect: {method} {path}: HTTP {exc.code}: {detail}") from None
        return json.loads(text) if text else None
