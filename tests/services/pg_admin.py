"""Database administration and DSNs shared by every kind of test PostgreSQL server."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

import cdc.testing as kit
from tests.services.common import ServiceError

SUPERUSER = "postgres"


def dsn_url(user: str, password: str | None, host: str, port: int, dbname: str) -> str:
    """Builds a ``postgresql://`` URL, quoting each part."""
    auth = quote(user, safe="")
    if password is not None:
        auth += ":" + quote(password, safe="")
    return f"postgresql://{auth}@{host}:{port}/{quote(dbname, safe='')}"


class PostgresAdmin:
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
    rows: list[Any] = []
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10) as conn:

        def gone() -> bool:
            rows[:] = conn.execute(
                "SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = %s",
                (dbname,),
            ).fetchall()
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
            return not rows

        try:
            kit.wait_until(gone, timeout, 0.1)
        except kit.WaitTimeout:
            raise ServiceError(f"replication slots of {dbname!r} still active: {rows}") from None
    return dropped
