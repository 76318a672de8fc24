"""The consumed offsets the sink keeps in ``_cdc_offsets``, beside the data they stand for.

They are written in the transaction that applies their records, so the data and the offsets
are committed together or not at all: after a crash the runner resumes from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import psycopg
from psycopg import sql

from cdc.log.base import TopicPartition
from sinks.postgres.catalog import OFFSETS, Ident


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
