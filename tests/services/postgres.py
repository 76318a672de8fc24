"""Throwaway PostgreSQL servers for tests, benchmarks and the demo.

``LocalPostgres`` runs a private cluster from the machine's PostgreSQL binaries (Debian's
``postgresql-15``, or the version ``$CDC_TEST_PG_VERSION`` names: 14, 16, 17 and 18 come from
``make pgbins``): ``initdb`` into a temp dir, ``wal_level=logical``, scram password auth on
127.0.0.1 and replication connections allowed. ``postgres_server()`` picks, in order, an external
server (``CDC_TEST_PG_DSN``), a local cluster, or a testcontainers container when a Docker engine
answers.

The other jobs live beside it: ``pg_binaries`` finds the server binaries, ``pg_admin`` holds the
DSN builder and the database and slot administration every kind of server shares, and
``pg_remote`` the servers the tests do not run (by DSN, or a container), and ``pg_reachable``
the copies of binaries the ``postgres`` OS user cannot reach in a private clone (as root). Their
public names are re-exported here, so tests import from this module only.

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
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Protocol

from tests.services.common import (
    Service,
    ServiceError,
    ServiceUnavailableError,
    docker_available,
)
from tests.services.pg_admin import SUPERUSER, PostgresAdmin, drop_replication_slots, dsn_url
from tests.services.pg_binaries import ENV_BIN_DIR, ENV_VERSION, PG_BINS, PG_ROOT, find_bin_dir
from tests.services.pg_reachable import reachable_base, reachable_program
from tests.services.pg_remote import ContainerPostgres, ExternalPostgres
from tests.services.ports import LOOPBACK, free_port

__all__ = [
    "BASE_SETTINGS",
    "ENV_BIN_DIR",
    "ENV_DSN",
    "ENV_VERSION",
    "PG_BINS",
    "PG_HBA",
    "PG_ROOT",
    "SUPERUSER",
    "ContainerPostgres",
    "ExternalPostgres",
    "LocalPostgres",
    "PostgresAdmin",
    "PostgresServer",
    "StopMode",
    "drop_replication_slots",
    "find_bin_dir",
    "postgres_server",
]

ENV_DSN = "CDC_TEST_PG_DSN"
OS_USER = "postgres"

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


class LocalPostgres(PostgresAdmin, Service):
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
        if self._as_root():
            # Run as the postgres user, the binaries and the data directory must be its to reach.
            self._ensure_os_user()
            found = reachable_program(OS_USER, found / "postgres").parent
            base_dir = reachable_base(OS_USER, None if base_dir is None else Path(base_dir))
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
        return dsn_url(user, password, self.host, self.port, dbname)

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

    def _run(self, program: Path, *args: str) -> None:
        if self._as_root():
            program = reachable_program(OS_USER, program)  # e.g. another version's pg_basebackup
        cmd = [*self._as_os_user(), str(program), *args]
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

    @staticmethod
    def _ensure_os_user() -> None:
        try:
            pwd.getpwnam(OS_USER)
        except KeyError:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/bin/false", OS_USER],
                check=True,
            )

    def _prepare_os_user(self) -> None:
        if not self._as_root():
            return
        for path in (self.workdir, self.socket_dir):
            self._chown(path)

    def _chown(self, path: Path) -> None:
        if self._as_root():
            shutil.chown(path, OS_USER, OS_USER)


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
