"""PostgreSQL servers the tests do not run themselves: one given by DSN, or a container."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

from tests.services.common import ExternalService
from tests.services.pg_admin import SUPERUSER, PostgresAdmin, dsn_url
from tests.services.pg_binaries import ENV_VERSION
from tests.services.ports import LOOPBACK


class ExternalPostgres(PostgresAdmin, ExternalService):
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
        return dsn_url(user, password, self.host, self.port, dbname)


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
        super().__init__(dsn_url(SUPERUSER, "postgres", host, port, "postgres"))

    def close(self) -> None:
        """Removes the container."""
        self._container.stop()
