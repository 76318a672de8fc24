"""History mode: every version of every row in ``<table>__history`` (SCD type 2).

Each change that passes the position guard becomes a version valid from its source commit time
(``source.ts_ms``). The key's open version is closed when a newer change arrives; a delete is
kept as a version of its own, closed at once (``valid_from = valid_to``): a tombstone with the
key, ``op = 'd'`` and NULL elsewhere (a delete is applied by its key: its ``before`` holds
placeholders, not values; the version it closes holds the row's last values). ``valid_to IS
NULL`` selects exactly the current rows. The guard is the current table's (its positions, the
deleted keys, the truncate watermark), read before the batch changes them, so replays add no
duplicate versions.

The batch's changes of a table, every one (not only the newest of each key), are staged in
``_cdc_versions``, typed as the target, with their commit time and op; the losers are deleted
from it before the current table is touched; :func:`append` then closes and appends.
"""

from __future__ import annotations

import time
from typing import Any, Final

import psycopg
from psycopg import sql

from cdc.contracts.errors import SinkFatal
from sinks.postgres.catalog import (
    HISTORY_SUFFIX,
    KEY_HASH,
    POSITION,
    SEQUENCE,
    TableInfo,
    side_name,
)

VERSIONS: Final = "_cdc_versions"
TS: Final = "_cdc_ts"
OP: Final = "_cdc_op"
COLUMNS: Final = ("valid_from", "valid_to", "op")
_V = sql.Identifier(VERSIONS)
_VALID_FROM = sql.SQL("to_timestamp({} / 1000.0)").format(sql.Identifier(TS))


def ensure(conn: psycopg.Connection[Any], info: TableInfo, source: str) -> None:
    """Create ``<table>__history`` if missing: every column, ``valid_from``, ``valid_to``,
    ``op`` and the position, with an index on the key of open versions.

    Raises:
        SinkFatal: a source column has one of the history's own names.
    """
    taken = sorted(set(info.columns) & set(COLUMNS))
    if taken:
        raise SinkFatal(
            f"table {source} has columns {taken}, which history mode needs for itself; use "
            "mode: current for this sink, or rename the columns (rename_fields)"
        )
    if info.history:
        return
    types = {**info.columns, KEY_HASH: "bytea"}
    columns = [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(types[n])) for n in info.stored]
    own = sql.SQL(
        "valid_from timestamptz, valid_to timestamptz, op text NOT NULL, "
        "{} bigint NOT NULL, {} bigint NOT NULL"
    ).format(sql.Identifier(POSITION), sql.Identifier(SEQUENCE))
    table = info.history_table
    conn.execute(
        sql.SQL("CREATE TABLE {} ({}, {})").format(table, sql.SQL(", ").join(columns), own)
    )
    keys = sql.SQL(", ").join(map(sql.Identifier, info.match))
    conn.execute(sql.SQL("CREATE INDEX ON {} ({}) WHERE valid_to IS NULL").format(table, keys))
    info.history = True


def create_versions(info: TableInfo, delete: str) -> sql.Composed:
    columns = sql.SQL(", ").join(map(sql.Identifier, [*info.stored, POSITION, SEQUENCE]))
    return sql.SQL(
        "CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {}, false AS {}, 0::bigint AS {}, "
        "''::text AS {} FROM {} WITH NO DATA"
    ).format(
        _V,
        columns,
        sql.Identifier(delete),
        sql.Identifier(TS),
        sql.Identifier(OP),
        info.target,
    )


def drop_losers(info: TableInfo) -> sql.Composed:
    """Delete the staged versions the guard refuses (takes the watermark as parameters)."""
    return sql.SQL(
        "DELETE FROM {v} AS v WHERE {vpos} <= (%s, %s) "
        "OR EXISTS (SELECT FROM {t} AS t WHERE {tkey} AND {tpos} >= {vpos}) "
        "OR EXISTS (SELECT FROM {d} AS d WHERE {dkey} AND {dpos} >= {vpos})"
    ).format(
        v=_V,
        t=info.target,
        d=info.deleted,
        vpos=_pos("v"),
        tpos=_pos("t"),
        dpos=_pos("d"),
        tkey=_same_key(info, "t", "v"),
        dkey=_same_key(info, "d", "v"),
    )


def append(conn: psycopg.Connection[Any], info: TableInfo) -> None:
    """Close each staged key's open version at its first new version, append the versions."""
    keys = sql.SQL(", ").join(map(sql.Identifier, info.match))
    order = sql.SQL("{}, {}").format(sql.Identifier(POSITION), sql.Identifier(SEQUENCE))
    conn.execute(
        sql.SQL(
            "UPDATE {h} AS h SET valid_to = f.first_from FROM (SELECT DISTINCT ON ({keys}) "
            "{keys}, {vf} AS first_from FROM {v} ORDER BY {keys}, {order}) AS f "
            "WHERE {same} AND h.valid_to IS NULL"
        ).format(
            h=info.history_table,
            keys=keys,
            vf=_VALID_FROM,
            v=_V,
            order=order,
            same=_same_key(info, "h", "f"),
        )
    )
    columns = sql.SQL(", ").join(map(sql.Identifier, info.stored))
    conn.execute(
        sql.SQL(
            "INSERT INTO {h} ({columns}, valid_from, valid_to, op, {order}) "
            "SELECT {columns}, vf, CASE WHEN {op} = 'd' THEN vf "
            "ELSE lead(vf) OVER (PARTITION BY {keys} ORDER BY {order}) END, {op}, {order} "
            "FROM (SELECT *, {vf} AS vf FROM {v}) AS x"
        ).format(
            h=info.history_table,
            columns=columns,
            order=order,
            op=sql.Identifier(OP),
            keys=keys,
            vf=_VALID_FROM,
            v=_V,
        )
    )
    conn.execute(sql.SQL("DROP TABLE {}").format(_V))


def close_truncated(
    conn: psycopg.Connection[Any], info: TableInfo, pos: tuple[int, int], ts_ms: int
) -> None:
    """Close every open version older than the truncate, at the truncate's time."""
    conn.execute(
        sql.SQL(
            "UPDATE {} SET valid_to = to_timestamp(%s / 1000.0) WHERE valid_to IS NULL "
            "AND ({}, {}) < (%s, %s)"
        ).format(info.history_table, sql.Identifier(POSITION), sql.Identifier(SEQUENCE)),
        [ts_ms, *pos],
    )


def keep_before_reset(conn: psycopg.Connection[Any], info: TableInfo) -> None:
    """Rename the history ``<table>__history_before_reset_<time>`` (the compacted log no longer
    holds every version it recorded); an empty one is dropped (a reset done again at once)."""
    if not info.history:
        return
    found = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(info.history_table)).fetchone()
    if not found or not found[0]:
        conn.execute(sql.SQL("DROP TABLE {}").format(info.history_table))
        return
    stamp = time.strftime("%Y%m%d%H%M%S")
    for n in range(1, 100):  # a second reset within the second
        kept = side_name(info.name, f"{HISTORY_SUFFIX}_before_reset_{stamp}{'' if n == 1 else n}")
        exists = conn.execute(
            "SELECT to_regclass(%s)", [sql.Identifier(info.schema, kept).as_string(conn)]
        ).fetchone()
        if exists is None or exists[0] is None:
            conn.execute(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    info.history_table, sql.Identifier(kept)
                )
            )
            return


def _pos(alias: str) -> sql.Composed:
    return sql.SQL("({}, {})").format(
        sql.Identifier(alias, POSITION), sql.Identifier(alias, SEQUENCE)
    )


def _same_key(info: TableInfo, left: str, right: str) -> sql.Composable:
    return sql.SQL(" AND ").join(
        sql.SQL("{} = {}").format(sql.Identifier(left, k), sql.Identifier(right, k))
        for k in info.match
    )
