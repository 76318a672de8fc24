"""The real Debezium: its embedded engine and PostgreSQL connector, writing records as JSON lines.

``tests/debezium`` (built by ``make jars``) holds Debezium 3.6.1's embedded engine with its
PostgreSQL connector, and ``cdc.tests.DebeziumJsonl``, a runner that starts the engine from a
properties file and writes each record as one line ``{"topic", "key", "value"}``, key and value
being the Kafka ``JsonConverter``'s bytes exactly (``value`` is null for a tombstone). The
differential tests run the same changes through Debezium and through ``cdc`` and compare.

``DebeziumRun`` runs one engine in the background (start, wait for records, stop);
``run_debezium`` runs one to a record count and returns its records. The properties file holds the
database password: it is written 0600 into the run's own temp dir, and no message of this module
prints it (the engine's own log masks it).

Example::

    records = run_debezium(dsn, {"table.include.list": "public.t"}, expect=3, timeout_s=120)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

import cdc.testing as kit
from tests.services.common import ServiceError, tail
from tests.services.jvm import TESTS_DIR, ensure_jars, find_java

__all__ = [
    "DEBEZIUM_DIR",
    "MAIN_CLASS",
    "DebeziumRun",
    "connector_properties",
    "run_debezium",
]

DEBEZIUM_DIR = TESTS_DIR / "debezium"
MAIN_CLASS = "cdc.tests.DebeziumJsonl"
ENV_LIB = "CDC_TEST_DEBEZIUM_LIB"
CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
FILE_OFFSETS = "org.apache.kafka.connect.storage.FileOffsetBackingStore"


def connector_properties(dsn: str, properties: Mapping[str, str], workdir: Path) -> dict[str, str]:
    """Builds the engine's properties: the connection from ``dsn``, then ``properties`` on top.

    Args:
        dsn: A libpq DSN or ``postgresql://`` URL of the captured database.
        properties: Debezium, connector and converter settings (``key.converter.*`` and
            ``value.converter.*`` configure the runner's two JsonConverters); they override the
            defaults here.
        workdir: The run's folder: the offsets file goes there.

    Returns:
        Every property of the run, the password among them.
    """
    conn = conninfo_to_dict(dsn)
    base = {
        "name": "dbz",
        "connector.class": CONNECTOR_CLASS,
        "database.hostname": str(conn.get("host", "127.0.0.1")),
        "database.port": str(conn.get("port", "5432")),
        "database.user": str(conn.get("user", "postgres")),
        "database.password": str(conn.get("password", "")),
        "database.dbname": str(conn.get("dbname", "postgres")),
        "topic.prefix": "dbz",
        "plugin.name": "pgoutput",
        "offset.storage": FILE_OFFSETS,
        "offset.storage.file.filename": str(workdir / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
    }
    return {**base, **{k: str(v) for k, v in properties.items()}}


def _escape(value: str) -> str:
    """Escapes a value for a java.util.Properties file (backslashes, line ends, leading blank)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + out if out.startswith(" ") else out


class DebeziumRun:
    """One Debezium engine in a child JVM, writing its records into ``out_file``.

    Attributes:
        workdir: The run's folder: properties, offsets, records and the engine's log.
        out_file: The JSON-lines file the runner appends to.
        log_file: The runner's stderr (Debezium's log).
    """

    def __init__(
        self,
        dsn: str,
        properties: Mapping[str, str],
        workdir: str | os.PathLike[str],
        *,
        max_records: int = 0,
    ):
        """Prepares (does not start) a run.

        Args:
            dsn: The captured database.
            properties: Settings over ``connector_properties``' defaults.
            workdir: An existing, empty folder the run owns.
            max_records: The runner stops by itself after this many records; 0: never.
        """
        self.workdir = Path(workdir)
        self.out_file = self.workdir / "records.jsonl"
        self.log_file = self.workdir / "debezium.log"
        self._props = connector_properties(dsn, properties, self.workdir)
        self._secret = self._props.get("database.password", "")
        self._max = max_records
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Writes the properties file (0600) and starts the runner.

        Raises:
            ServiceUnavailableError: No Java, or no jars and no Maven.
            ServiceError: The jars could not be built.
        """
        lib = ensure_jars("debezium", "debezium-embedded-*.jar", ENV_LIB)
        java = find_java()
        assert java is not None  # ensure_jars raised otherwise
        props_file = self.workdir / "debezium.properties"
        fd = os.open(props_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for key, value in sorted(self._props.items()):
                f.write(f"{key}={_escape(value)}\n")
        classpath = f"{lib}/*{os.pathsep}{DEBEZIUM_DIR / 'target' / 'classes'}"
        # A small heap and the serial collector: one engine on a 2-core machine beside the tests.
        argv = [java, "-Xmx512m", "-XX:+UseSerialGC", "-cp", classpath, MAIN_CLASS]
        argv += [str(props_file), str(self.out_file), str(self._max)]
        with self.log_file.open("ab") as log:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.workdir
            )

    def lines(self) -> list[str]:
        """Returns the complete lines written so far, exactly as Debezium's converter wrote them."""
        try:
            text = self.out_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
        return complete.splitlines()

    def records(self) -> list[dict[str, Any]]:
        """Returns the records written so far, each ``{"topic", "key", "value"}`` parsed."""
        return [json.loads(line) for line in self.lines()]

    def log_tail(self, lines: int = 60) -> str:
        """Returns the end of Debezium's log, with the password (should it appear) masked."""
        text = tail(self.log_file, lines)
        return text.replace(self._secret, "***") if self._secret else text

    def wait_for(self, count: int, timeout_s: float) -> list[dict[str, Any]]:
        """Waits until at least ``count`` records were written and returns them all.

        Raises:
            ServiceError: The runner exited first, or ``timeout_s`` passed.
        """
        self.wait_until(
            lambda: f"{count} records (has {len(self.lines())})",
            lambda: len(self.lines()) >= count,
            timeout_s,
        )
        return [json.loads(line) for line in self.lines()]

    def wait_until(
        self, what: str | Callable[[], str], done: Callable[[], bool], timeout_s: float
    ) -> None:
        """Waits until ``done()`` (which may read :meth:`records`); ``what`` may be a callable,
        asked when the wait fails, to say how far it got.

        Raises:
            ServiceError: The runner exited first, or ``timeout_s`` passed; with the log's end.
        """

        def ended() -> bool:
            if done():
                return True
            if self._proc is not None and self._proc.poll() is not None:
                if done():  # it may have written the last lines just before exiting
                    return True
                raise ServiceError(
                    f"debezium: runner exited {self._proc.returncode} before {_said(what)}:\n"
                    f"{self.log_tail()}"
                )
            return False

        try:
            kit.wait_until(ended, timeout_s, 0.2)
        except kit.WaitTimeout:
            raise ServiceError(
                f"debezium: {_said(what)} not after {timeout_s:.0f} s:\n{self.log_tail()}"
            ) from None

    def wait_streaming(self, dsn: str, timeout_s: float) -> None:
        """Waits until the engine streams: its replication slot is active in the database.

        Debezium creates the slot before its snapshot reads, so any change committed from here
        on reaches it by the stream, never by the snapshot.

        Raises:
            ServiceError: The runner exited first, or ``timeout_s`` passed.
        """
        slot = self._props.get("slot.name", "debezium")

        def active() -> bool:
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
                ).fetchone()
            return row is not None and bool(row[0])

        self.wait_until(f"slot {slot} active", active, timeout_s)

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """Stops the runner with SIGTERM (the engine closes and commits), killing it if it hangs.

        Returns:
            The runner's exit code (None if it never started).
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        return proc.returncode

    def __enter__(self) -> DebeziumRun:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_debezium(
    dsn: str,
    properties: Mapping[str, str],
    expect: int,
    timeout_s: float,
    *,
    workdir: str | os.PathLike[str] | None = None,
    during: Callable[[], None] | None = None,
    ready: int = 0,
) -> list[dict[str, Any]]:
    """Runs Debezium until it wrote ``expect`` records, and returns them.

    Args:
        dsn: The captured database.
        properties: Settings over ``connector_properties``' defaults (``slot.name``,
            ``table.include.list``, ``snapshot.mode``, ``decimal.handling.mode``, ...).
        expect: Records to wait for; the runner stops at this count.
        timeout_s: How long the whole run may take.
        workdir: An existing, empty folder for the run's files (kept, with Debezium's log);
            None: a temp dir, removed afterwards.
        during: Called once the engine streams and ``ready`` records (the snapshot's) arrived:
            the changes made there reach Debezium by the stream.
        ready: Records to wait for before ``during``.

    Returns:
        The records, each ``{"topic", "key", "value"}`` with key and value parsed.

    Raises:
        ServiceError: The runner failed, or the records did not all come in time.
    """
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="debezium-") as tmp:
            return _run_in(tmp, dsn, properties, expect, timeout_s, during, ready)
    return _run_in(workdir, dsn, properties, expect, timeout_s, during, ready)


def _run_in(
    workdir: str | os.PathLike[str],
    dsn: str,
    properties: Mapping[str, str],
    expect: int,
    timeout_s: float,
    during: Callable[[], None] | None,
    ready: int,
) -> list[dict[str, Any]]:
    """``run_debezium`` in an existing ``workdir``."""
    deadline = time.monotonic() + timeout_s
    with DebeziumRun(dsn, properties, workdir, max_records=expect) as run:
        if during is not None:
            run.wait_streaming(dsn, timeout_s)
            run.wait_for(ready, max(1.0, deadline - time.monotonic()))
            during()
        return run.wait_for(expect, max(1.0, deadline - time.monotonic()))[:expect]


def _said(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()
