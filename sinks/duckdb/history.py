"""History mode: every version of every row in ``<table>__history`` (SCD type 2).

Each winning change (see :mod:`sinks.duckdb.merge`) becomes a version valid from its source
commit time. The key's open version is closed when a newer change arrives; a delete is kept as
a version of its own that is closed at once (``valid_from == valid_to``), so ``valid_to IS
NULL`` selects exactly the current rows. A delete's version is a tombstone: its key, ``op``
``'d'``, and NULL in every other column (a delete is applied by its key: under REPLICA
IDENTITY DEFAULT its ``before`` holds placeholders, not values; the version it closes holds
the row's last values). Only winners are written, and a winner is newer than
anything the sink holds for its key, so replays add no duplicates.
"""

from __future__ import annotations

import time
from typing import Any

from sinks.duckdb.catalog import POSITION, SEQUENCE, TableState, quote
from sinks.duckdb.merge import WINNERS, same_key
from sinks.duckdb.plan import Truncate
from sinks.duckdb.stage import OP, TS

_VALID_FROM = f"to_timestamp({TS} / 1000.0)"


def close_truncated(con: Any, state: TableState, truncate: Truncate) -> None:
    """Close every open version older than the truncate, at the truncate's time."""
    con.execute(
        f"UPDATE {state.history_table} SET valid_to = to_timestamp(? / 1000.0) "
        f"WHERE valid_to IS NULL AND ({POSITION}, {SEQUENCE}) < (?, ?)",
        [truncate.ts_ms, *truncate.pos],
    )


def append_versions(con: Any, state: TableState) -> None:
    """Close each winning key's open version and append the winners as versions."""
    keys = ", ".join(quote(c.name) for c in state.keys)
    order = f"{POSITION}, {SEQUENCE}"
    con.execute(
        f"UPDATE {state.history_table} AS __cdc_h SET valid_to = __cdc_f.first_from FROM "
        f"(SELECT {keys}, first({_VALID_FROM} ORDER BY {order}) AS first_from "
        f"FROM {WINNERS} GROUP BY {keys}) AS __cdc_f "
        f"WHERE {same_key(state, '__cdc_h', '__cdc_f')} AND __cdc_h.valid_to IS NULL"
    )
    columns = ", ".join(quote(c.name) for c in state.columns)
    # The window reads keys and times alone, joined back to the rows by rowid: over whole rows
    # it holds every value of the batch in memory (DuckDB's window does not spill them).
    con.execute(
        f"INSERT INTO {state.history_table} ({columns}, valid_from, valid_to, op, {order}) "
        f"SELECT {columns}, __cdc_v.vf, __cdc_v.vt, {OP}, {order} FROM {WINNERS} "
        f"JOIN (SELECT r, vf, CASE WHEN {OP} = 'd' THEN vf ELSE "
        f"lead(vf) OVER (PARTITION BY {keys} ORDER BY {order}) END AS vt "
        f"FROM (SELECT rowid AS r, {keys}, {order}, {OP}, {_VALID_FROM} AS vf FROM {WINNERS})"
        f") AS __cdc_v ON {WINNERS}.rowid = __cdc_v.r"
    )


def keep_before_reset(con: Any, state: TableState) -> None:
    """Rename the history table ``<table>__history_before_reset_<time>`` (a reset rebuilds the
    table from the compacted log, which no longer holds every version it recorded).

    An empty one is dropped instead: a reset done again at once (it is idempotent) would
    otherwise find the name of the second it kept the first one under taken.
    """
    (count,) = con.execute(f"SELECT count(*) FROM {state.history_table}").fetchone()
    if not count:
        con.execute(f"DROP TABLE {state.history_table}")
        return
    base = f"{state.table}__history_before_reset_{time.strftime('%Y%m%d%H%M%S')}"
    taken = {
        str(name)
        for (name,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = ? AND starts_with(table_name, ?)",
            [state.schema, base],
        ).fetchall()
    }
    kept, n = base, 1
    while kept in taken:  # a second reset within the second, the first's rows rebuilt
        n += 1
        kept = f"{base}_{n}"
    con.execute(f"ALTER TABLE {state.history_table} RENAME TO {quote(kept)}")
