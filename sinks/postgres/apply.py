"""Apply one table's changes: staged with ``COPY``, merged by SQL, guarded by source position.

A staged change wins only if it is newer than everything the target holds for its key: the
row's ``(_cdc_pos, _cdc_seq)``, the key's entry in ``<table>__cdc_deleted``, and the table's
truncate watermark. Upserts are ``INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE`` the
stored position is older (PostgreSQL 14 has no ``MERGE``, and this one statement does the same
work on every version); a winning delete removes the row and leaves its position in the
deleted keys, so a replayed older upsert cannot bring the row back. Replays and late older
changes therefore change nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import psycopg
from psycopg import sql

from cdc.contracts.errors import RecordError
from cdc.contracts.sink import SinkRecord
from sinks.keyed import Change, Kind
from sinks.postgres import catalog, enums, history
from sinks.postgres.catalog import POSITION, SEQUENCE, Ident, TableInfo
from sinks.postgres.connection import first_line
from sinks.postgres.plan import TableChanges, commit_ms
from sinks.postgres.renames import renamed
from sinks.postgres.types import Convert

STAGE: Final = "_cdc_stage"
DELETE: Final = "_cdc_delete"
_S = sql.Identifier(STAGE)
_COLUMN_IN_CONTEXT: Final = re.compile(r"column (\S+?):")


def apply(
    conn: psycopg.Connection[Any],
    info: TableInfo,
    changes: TableChanges,
    convert: Callable[[SinkRecord], Mapping[str, Convert]],
    ident: Ident,
    keep_history: bool = False,
) -> bool:
    """Apply ``changes`` to ``info``'s table in the caller's transaction (``keep_history``: and
    their versions to its history); returns whether a truncate was applied.

    Raises:
        RecordError: a record whose values cannot be staged (nothing of the table is applied).
    """
    catalog.read_watermark(conn, info, ident, for_truncate=changes.truncate is not None)
    truncated = _truncate(conn, info, changes.truncate, ident)
    if truncated and keep_history and changes.truncate is not None:
        history.close_truncated(conn, info, changes.truncate, changes.truncate_ms)
    winners = changes.changes()
    staged = [_staged_row(info, change, convert(change.record)) for change in winners]
    if not staged:
        return truncated
    columns = [*info.columns, POSITION, SEQUENCE, DELETE]
    if keep_history:  # staged and judged before the current table changes
        _stage_versions(conn, info, changes.versions(), convert, columns)
    conn.execute(_create_stage(info))
    _copy(conn, info, _S, columns, staged, winners)
    _hash_keys(conn, info, _S)
    kinds = {row[-1] for row in staged}
    if True in kinds:
        conn.execute(_delete_rows(info))
        conn.execute(_remember_deletes(info), info.watermark)
    if False in kinds:
        conn.execute(_upsert(info), info.watermark)
        conn.execute(_forget_deletes(info))
    conn.execute(sql.SQL("DROP TABLE {}").format(_S))
    if keep_history:
        history.append(conn, info)
    return truncated


def _stage_versions(
    conn: psycopg.Connection[Any],
    info: TableInfo,
    versions: list[Change],
    convert: Callable[[SinkRecord], Mapping[str, Convert]],
    columns: list[str],
) -> None:
    rows = [(*_staged_row(info, c, convert(c.record)), commit_ms(c), _op(c)) for c in versions]
    stage = sql.Identifier(history.VERSIONS)
    conn.execute(history.create_versions(info, DELETE))
    _copy(conn, info, stage, [*columns, history.TS, history.OP], rows, versions)
    _hash_keys(conn, info, stage)
    conn.execute(history.drop_losers(info), info.watermark)


def _op(change: Change) -> str:
    """The version's ``op``: the envelope's, ``d`` for a tombstone read as its delete."""
    value = change.record.value
    return "d" if value is None else str(value["op"])


def _hash_keys(conn: psycopg.Connection[Any], info: TableInfo, stage: sql.Identifier) -> None:
    """Fill a staged hashed key from the staged (typed) columns, as the target's rows got it."""
    if info.hashed:
        conn.execute(
            sql.SQL("UPDATE {} AS s SET {} = {}").format(
                stage, sql.Identifier(catalog.KEY_HASH), catalog.key_hash(info, "s")
            )
        )


def _truncate(
    conn: psycopg.Connection[Any], info: TableInfo, pos: tuple[int, int] | None, ident: Ident
) -> bool:
    if pos is None or pos <= info.watermark:
        return False
    older = sql.SQL("({}, {}) < (%s, %s)").format(
        sql.Identifier(POSITION), sql.Identifier(SEQUENCE)
    )
    for table in (info.target, info.deleted):
        conn.execute(sql.SQL("DELETE FROM {} WHERE {}").format(table, older), pos)
    info.watermark = pos
    catalog.save_watermark(conn, info, ident)
    return True


def _staged_row(info: TableInfo, change: Change, convert: Mapping[str, Convert]) -> tuple[Any, ...]:
    """The stage's row of one change: the new image, or for a delete its key alone (a delete's
    ``before`` holds placeholders under REPLICA IDENTITY DEFAULT, never values to store)."""
    source = change.row if change.kind is Kind.UPSERT else change.key
    if source is not None and info.former and not info.former.keys().isdisjoint(source):
        source = renamed(source, info.former)  # written before a rename
    if source is None or any(k not in source for k in info.keys):
        raise RecordError(f"no value for key columns {info.keys}", change.record)
    if change.kind is Kind.UPSERT and not info.columns.keys() >= source.keys():
        unknown = sorted(set(source) - set(info.columns))
        raise RecordError(
            f"columns {unknown} are in no published schema of {info.schema}.{info.name}",
            change.record,
        )
    get = source.get
    try:
        values = [fn(get(c)) for c, fn in convert.items()]
    except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
        raise RecordError(f"a value cannot be read: {type(exc).__name__}", change.record) from exc
    position, sequence = change.pos or (0, 0)
    return (*values, position, sequence, change.kind is not Kind.UPSERT)


def _copy(
    conn: psycopg.Connection[Any],
    info: TableInfo,
    stage: sql.Identifier,
    columns: list[str],
    rows: list[tuple[Any, ...]],
    changes: list[Change],
) -> None:
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        stage, sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    try:
        with conn.transaction(), conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
    except (psycopg.DataError, psycopg.IntegrityError) as exc:
        column = _COLUMN_IN_CONTEXT.search(exc.diag.context or "")
        if column and column.group(1) in info.enums and exc.sqlstate == enums.INVALID_TEXT:
            source = ".".join(changes[0].table)
            raise enums.missing_label(info, column.group(1), source) from None
        raise _culprit(conn, statement, rows, changes, exc) from None


def _culprit(
    conn: psycopg.Connection[Any],
    statement: sql.Composed,
    rows: list[tuple[Any, ...]],
    changes: list[Change],
    error: psycopg.Error,
) -> RecordError:
    """The record whose row PostgreSQL refused, found by staging the rows one at a time. The
    message names the column, never the value (PostgreSQL's own quotes it)."""
    column = _COLUMN_IN_CONTEXT.search(error.diag.context or "")
    named = f", column {column.group(1)}" if column else ""
    why = (error.diag.message_primary or first_line(error)).split('"')[0].rstrip(" :")
    for row, change in zip(rows, changes, strict=True):
        try:
            with conn.transaction(), conn.cursor() as cur, cur.copy(statement) as copy:
                copy.write_row(row)
        except psycopg.Error:
            return RecordError(f"PostgreSQL refused a value{named}: {why}", change.record)
    return RecordError(f"PostgreSQL refused the batch{named}: {why}", changes[0].record)


def _create_stage(info: TableInfo) -> sql.Composed:
    # Typed as the target (CREATE TABLE AS keeps each column's type, not its constraints):
    # COPY's text is parsed by the very input functions the target's columns use.
    columns = sql.SQL(", ").join(map(sql.Identifier, [*info.stored, POSITION, SEQUENCE]))
    return sql.SQL(
        "CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {}, false AS {} FROM {} WITH NO DATA"
    ).format(_S, columns, sql.Identifier(DELETE), info.target)


def _pos(alias: str) -> sql.Composed:
    return sql.SQL("({}, {})").format(
        sql.Identifier(alias, POSITION), sql.Identifier(alias, SEQUENCE)
    )


def _same_key(info: TableInfo, left: str, right: str) -> sql.Composable:
    return sql.SQL(" AND ").join(
        sql.SQL("{} = {}").format(sql.Identifier(left, k), sql.Identifier(right, k))
        for k in info.match
    )


def _delete_rows(info: TableInfo) -> sql.Composed:
    return sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE s.{} AND {} AND {} < {}").format(
        info.target, _S, sql.Identifier(DELETE), _same_key(info, "t", "s"), _pos("t"), _pos("s")
    )


def _remember_deletes(info: TableInfo) -> sql.Composed:
    keys = sql.SQL(", ").join(map(sql.Identifier, info.match))
    kept = sql.SQL(", ").join(map(sql.Identifier, info.deleted_columns))
    picked = sql.SQL(", ").join(
        sql.Identifier("s", k) for k in [*info.deleted_columns, POSITION, SEQUENCE]
    )
    return sql.SQL(
        "INSERT INTO {d} AS d ({kept}, {p}, {q}) SELECT {picked} FROM {s} AS s WHERE s.{flag} "
        "AND {spos} > (%s, %s) AND NOT EXISTS (SELECT FROM {t} AS t WHERE {tkey} AND "
        "{tpos} >= {spos}) ON CONFLICT ({keys}) DO UPDATE SET {p} = EXCLUDED.{p}, "
        "{q} = EXCLUDED.{q} WHERE {dpos} < (EXCLUDED.{p}, EXCLUDED.{q})"
    ).format(
        d=info.deleted,
        t=info.target,
        s=_S,
        keys=keys,
        kept=kept,
        picked=picked,
        p=sql.Identifier(POSITION),
        q=sql.Identifier(SEQUENCE),
        flag=sql.Identifier(DELETE),
        spos=_pos("s"),
        tpos=_pos("t"),
        dpos=_pos("d"),
        tkey=_same_key(info, "t", "s"),
    )


def _upsert(info: TableInfo) -> sql.Composed:
    columns = [*info.stored, POSITION, SEQUENCE]
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    picked = sql.SQL(", ").join(sql.Identifier("s", c) for c in columns)
    updates = sql.SQL(", ").join(
        sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
        for c in columns
        if c not in info.match
    )
    return sql.SQL(
        "INSERT INTO {t} AS t ({names}) SELECT {picked} FROM {s} AS s WHERE NOT s.{flag} "
        "AND {spos} > (%s, %s) AND NOT EXISTS (SELECT FROM {d} AS d WHERE {dkey} AND "
        "{dpos} >= {spos}) ON CONFLICT ({keys}) DO UPDATE SET {updates} "
        "WHERE {tpos} < (EXCLUDED.{p}, EXCLUDED.{q})"
    ).format(
        t=info.target,
        d=info.deleted,
        s=_S,
        names=names,
        picked=picked,
        flag=sql.Identifier(DELETE),
        spos=_pos("s"),
        dpos=_pos("d"),
        tpos=_pos("t"),
        dkey=_same_key(info, "d", "s"),
        keys=sql.SQL(", ").join(map(sql.Identifier, info.match)),
        updates=updates,
        p=sql.Identifier(POSITION),
        q=sql.Identifier(SEQUENCE),
    )


def _forget_deletes(info: TableInfo) -> sql.Composed:
    """A deleted key written again newer than its delete needs no guard any more."""
    return sql.SQL("DELETE FROM {} AS d USING {} AS s WHERE NOT s.{} AND {} AND {} < {}").format(
        info.deleted, _S, sql.Identifier(DELETE), _same_key(info, "d", "s"), _pos("d"), _pos("s")
    )
