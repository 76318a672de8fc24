"""The consumed offsets the sink keeps in ``_cdc_offsets``, beside the data they stand for.

They are written in the transaction that applies their records, so the data and the offsets
are committed together or not at all: after a crash the runner resumes from them.

Beside them, ``_cdc_positions`` holds the source position the data is consistent up to (one
row per pipeline and sink, :class:`cdc.contracts.sink.PositionedSink`), written in the same
transaction as the offsets that reach it, and deleted with a table reset. The text is the
source's position as ``cdc status`` prints it (PostgreSQL: ``0/16B3748``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import psycopg
from psycopg import sql

from cdc.log.base import TopicPartition
from sinks.postgres.catalog import OFFSETS, Ident
from sinks.postgres.config import PostgresSinkConfig
from sinks.postgres.connection import connect, translate

POSITIONS: Final = "_cdc_positions"


def positions_ddl(schema: str) -> sql.Composed:
    """The statement creating ``_cdc_positions``, if missing."""
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, sink text NOT NULL, "
        "position text NOT NULL, PRIMARY KEY (pipeline, sink))"
    ).format(sql.Identifier(schema, POSITIONS))


def load(conn: psycopg.Connection[Any], schema: str, ident: Ident) -> dict[TopicPartition, int]:
    rows = conn.execute(
        sql.SQL(
            "SELECT topic, partition, next_offset FROM {} WHERE pipeline = %s AND sink = %s"
        ).format(sql.Identifier(schema, OFFSETS)),
        [ident.pipeline, ident.sink],
    )
    return {TopicPartition(t, int(p)): int(o) for t, p, o in rows}


def store(
    conn: psycopg.Connection[Any],
    schema: str,
    ident: Ident,
    offsets: Mapping[TopicPartition, int],
) -> None:
    """Upsert the next offset of each partition (in the caller's transaction)."""
    if not offsets:
        return
    rows = [(ident.pipeline, ident.sink, tp.topic, tp.partition, o) for tp, o in offsets.items()]
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL(
                "INSERT INTO {} VALUES (%s, %s, %s, %s, %s) ON CONFLICT (pipeline, sink, topic, "
                "partition) DO UPDATE SET next_offset = EXCLUDED.next_offset"
            ).format(sql.Identifier(schema, OFFSETS)),
            rows,
        )


def forget_topics(
    conn: psycopg.Connection[Any], schema: str, ident: Ident, topics: Iterable[str]
) -> None:
    conn.execute(
        sql.SQL("DELETE FROM {} WHERE pipeline = %s AND sink = %s AND topic = ANY(%s)").format(
            sql.Identifier(schema, OFFSETS)
        ),
        [ident.pipeline, ident.sink, list(topics)],
    )


def store_position(conn: psycopg.Connection[Any], schema: str, ident: Ident, position: str) -> None:
    """Upsert the consistent position (in the caller's transaction, with the offsets)."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {} VALUES (%s, %s, %s) ON CONFLICT (pipeline, sink) "
            "DO UPDATE SET position = EXCLUDED.position"
        ).format(sql.Identifier(schema, POSITIONS)),
        [ident.pipeline, ident.sink, position],
    )


def forget_position(conn: psycopg.Connection[Any], schema: str, ident: Ident) -> None:
    """No position stored (in the caller's transaction): the data no longer holds it."""
    conn.execute(
        sql.SQL("DELETE FROM {} WHERE pipeline = %s AND sink = %s").format(
            sql.Identifier(schema, POSITIONS)
        ),
        [ident.pipeline, ident.sink],
    )


def load_position(conn: psycopg.Connection[Any], schema: str, ident: Ident) -> str | None:
    """The stored position; ``None`` when none is (or the schema has no such table yet)."""
    found = conn.execute(
        sql.SQL("SELECT to_regclass(%s) IS NOT NULL"),
        [sql.Identifier(schema, POSITIONS).as_string(conn)],
    ).fetchone()
    if not found or not found[0]:
        return None
    row = conn.execute(
        sql.SQL("SELECT position FROM {} WHERE pipeline = %s AND sink = %s").format(
            sql.Identifier(schema, POSITIONS)
        ),
        [ident.pipeline, ident.sink],
    ).fetchone()
    return None if row is None else str(row[0])


def read_consistent_position(config: PostgresSinkConfig, *, pipeline: str) -> str | None:
    """For ``cdc status``: the position the sink stored with its offsets, read from the target.

    Raises:
        SinkUnavailable: the target cannot be reached.
    """
    conn = connect(config)
    try:
        return load_position(conn, config.schema_, Ident(pipeline, config.name))
    except psycopg.Error as exc:
        raise translate(exc, config, "reading the consistent position") from None
    finally:
        conn.close()
