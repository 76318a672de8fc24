"""Merge a staged batch into the current-state table, guarded by source position.

A staged change wins only if it is newer than everything the sink holds for its key: the row's
``__cdc_position``/``__cdc_sequence``, the key's entry in the deleted-keys table, and the table's
truncate watermark. Winners replace their rows (delete, then insert the new image), and winning
deletes leave their position in the deleted-keys table. Replays and late older changes
therefore change nothing.
"""

from __future__ import annotations

from typing import Any, Final

from sinks.duckdb.catalog import POSITION, SEQUENCE, TableState, quote, save_watermark
from sinks.duckdb.plan import Truncate
from sinks.duckdb.stage import OP, STAGE

WINNERS: Final = "__cdc_win"
LATEST: Final = "__cdc_latest"


def same_key(state: TableState, left: str, right: str) -> str:
    """SQL matching the key columns of two aliases."""
    return " AND ".join(f"{left}.{quote(c.name)} = {right}.{quote(c.name)}" for c in state.keys)


def newer(left: str, right: str) -> str:
    """SQL: ``left``'s source position is after ``right``'s (NULL ``right``: no entry)."""
    return (
        f"({right}.{POSITION} IS NULL OR ({left}.{POSITION}, {left}.{SEQUENCE}) > "
        f"({right}.{POSITION}, {right}.{SEQUENCE}))"
    )


def apply_truncate(con: Any, state: TableState, truncate: Truncate) -> bool:
    """Delete every row older than the truncate; returns False if it was applied before."""
    if truncate.pos <= state.watermark:
        return False
    older = f"({POSITION}, {SEQUENCE}) < (?, ?)"
    con.execute(f"DELETE FROM {state.target} WHERE {older}", list(truncate.pos))
    con.execute(f"DELETE FROM {state.deleted} WHERE {older}", list(truncate.pos))
    state.watermark = truncate.pos
    save_watermark(con, state)
    return True


def select_winners(con: Any, state: TableState) -> None:
    """``__cdc_win``: staged changes newer than the row, the deleted key and the watermark."""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {WINNERS} AS SELECT s.* FROM {STAGE} s "
        f"LEFT JOIN {state.target} t ON {same_key(state, 't', 's')} "
        f"LEFT JOIN {state.deleted} d ON {same_key(state, 'd', 's')} "
        f"WHERE {newer('s', 't')} AND {newer('s', 'd')} "
        f"AND (s.{POSITION}, s.{SEQUENCE}) > (?, ?)",
        list(state.watermark),
    )


def select_latest(con: Any, state: TableState) -> str:
    """``__cdc_latest``: the newest winner per key (history mode stages every change)."""
    keys = ", ".join(quote(c.name) for c in state.keys)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {LATEST} AS SELECT * FROM {WINNERS} QUALIFY "
        f"row_number() OVER (PARTITION BY {keys} ORDER BY {POSITION} DESC, {SEQUENCE} DESC) = 1"
    )
    return LATEST


def merge_current(con: Any, state: TableState, latest: str) -> None:
    """Replace the rows of the winning keys and remember the winning deletes."""
    columns = ", ".join(quote(c.name) for c in state.columns)
    keys = ", ".join(quote(c.name) for c in state.keys)
    positions = f"{POSITION}, {SEQUENCE}"
    for table in (state.target, state.deleted):
        con.execute(
            f"DELETE FROM {table} AS t WHERE EXISTS "
            f"(SELECT 1 FROM {latest} w WHERE {same_key(state, 't', 'w')})"
        )
    con.execute(
        f"INSERT INTO {state.target} ({columns}, {positions}) "
        f"SELECT {columns}, {positions} FROM {latest} WHERE {OP} <> 'd'"
    )
    con.execute(
        f"INSERT INTO {state.deleted} ({keys}, {positions}) "
        f"SELECT {keys}, {positions} FROM {latest} WHERE {OP} = 'd'"
    )
