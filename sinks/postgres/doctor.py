"""``cdc doctor`` for the PostgreSQL sink: the server answers, is 14 or newer, and lets the
sink's user create its tables in the target schema. Nothing is written."""

from __future__ import annotations

from typing import Any, Final

import psycopg

from cdc.contracts.checks import Check, failed, passed
from cdc.contracts.errors import CdcError
from sinks.postgres.config import PostgresSinkConfig
from sinks.postgres.connection import connect, translate, where

MIN_VERSION: Final = 140000


def doctor(config: PostgresSinkConfig, pipeline_name: str) -> list[Check]:
    """``reachable``, ``version`` and ``permitted``, each ok or with its fix."""
    target = where(config)
    try:
        conn = connect(config)
    except CdcError as exc:
        fix = f"start the server at {target}, or correct the sink's dsn (user, password, dbname)"
        return [failed("reachable", str(exc), fix)]
    try:
        reached = passed("reachable", f"{target} accepts the sink's connection")
        return [reached, _version(conn), _permitted(conn, config)]
    except psycopg.Error as exc:
        return [failed("reachable", str(translate(exc, config, "checking")), "see the error")]
    finally:
        conn.close()


def _version(conn: psycopg.Connection[Any]) -> Check:
    number = conn.info.server_version
    shown = f"{number // 10000}.{number % 10000}"
    if number < MIN_VERSION:
        fix = "use PostgreSQL 14 or newer as the target"
        return failed("version", f"PostgreSQL {shown} is older than 14", fix)
    return passed("version", f"PostgreSQL {shown}")


def _permitted(conn: psycopg.Connection[Any], config: PostgresSinkConfig) -> Check:
    schema = config.schema_
    row = conn.execute(
        "SELECT CASE WHEN to_regnamespace(%s) IS NULL "
        "THEN has_database_privilege(current_database(), 'CREATE') "
        "ELSE has_schema_privilege(%s, 'CREATE') END, current_user",
        [schema, schema],
    ).fetchone()
    conn.rollback()
    allowed, user = (bool(row[0]), str(row[1])) if row is not None else (False, "?")
    if not allowed:
        fix = (
            f"GRANT CREATE ON SCHEMA {schema} TO {user} (or, for a schema the sink creates, "
            f"GRANT CREATE ON DATABASE <db> TO {user})"
        )
        return failed("permitted", f"user {user} may not create tables in schema {schema}", fix)
    return passed("permitted", f"user {user} may create tables in schema {schema}")
