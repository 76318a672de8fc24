"""How snapshot watermarks and ``cdc snapshot`` requests reach the change stream.

Two channels, chosen the same way by the running source and by ``cdc snapshot`` (same role,
same answer):

* **logical messages** (the default): ``pg_logical_emit_message(true, '<pipeline>.wm' or
  '<pipeline>.signal', payload)``, transactional, so the stream delivers them in commit order;
* **a signal table**, when the role may not run ``pg_logical_emit_message`` (or
  ``source.snapshot_signal_table`` names one): rows ``(kind, payload)`` inserted into a small
  table in the publication. The stream delivers the inserts in commit order like any change; the
  source takes them out of the batches before they reach a topic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from cdc.contracts.errors import SourceFatal
from cdc.contracts.events import ChangeEvent, Op
from connectors.postgres.catalog import EMIT_MESSAGE
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.replication.standby import read_only_problem
from connectors.postgres.snapshot.written import WrittenChange
from snapshots.watermark import parse

#: A change of a batch, as the windows see it: an event, or the record the stream wrote.
Change = ChangeEvent | WrittenChange

WATERMARK = "wm"
SIGNAL = "signal"

Marker = tuple[int, str, str, int]  # (index in the batch, kind, payload, lsn)

#: Whether the role may run the text variant of ``pg_logical_emit_message``, and its full
#: signature (for the DBA's GRANT). Found by argument types rather than by a signature string:
#: PostgreSQL 17 added a fourth argument (``flush``), so
#: ``'pg_logical_emit_message(boolean, text, text)'::regprocedure`` names no function there.
_EMIT_FUNCTION = sql.SQL(
    "SELECT has_function_privilege(p.oid, 'EXECUTE'), p.oid::regprocedure::text"
    " FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace"
    " AND p.proname = 'pg_logical_emit_message' AND p.proargtypes[2] = 'text'::regtype"
)


@dataclass(frozen=True, slots=True)
class Channel:
    """Where a pipeline's watermarks and signals go.

    Attributes:
        pipeline: the pipeline name (message prefixes).
        table: ``(schema, table)`` of the signal table, or ``None`` for logical messages.
    """

    pipeline: str
    table: tuple[str, str] | None = None

    @property
    def table_id(self) -> str | None:
        return None if self.table is None else ".".join(self.table)

    def prefix(self, kind: str) -> str:
        """The logical-message prefix of ``kind`` (``wm`` or ``signal``)."""
        return f"{self.pipeline}.{kind}"

    def write(self, conn: psycopg.Connection[Any], kind: str, payload: str) -> str:
        """Write one watermark or signal in its own transaction (``conn`` is autocommit);
        returns the WAL position written, for messages.

        Raises:
            SourceFatal: the role may not write it.
        """
        try:
            if self.table is None:
                row = conn.execute(
                    EMIT_MESSAGE.format(sql.Literal(True)), (self.prefix(kind), payload)
                ).fetchone()
            else:
                row = conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (kind, payload) VALUES (%s, %s)"
                        " RETURNING pg_current_wal_insert_lsn()::text"
                    ).format(sql.Identifier(*self.table)),
                    (kind, payload),
                ).fetchone()
        except psycopg.errors.InsufficientPrivilege as exc:
            raise SourceFatal(
                f"cannot write a snapshot {kind}: {exc.diag.message_primary}"
            ) from exc
        except (psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.InternalError) as exc:
            if not in_recovery(conn):
                raise
            # A standby writes no WAL, and the snapshot's windows need a mark in the stream.
            what = f"cannot write a snapshot {kind} (online snapshots write watermarks)"
            raise SourceFatal(read_only_problem(what)) from exc
        return str(row[0]) if row else ""

    def clean(self, conn: psycopg.Connection[Any], payloads: list[str]) -> None:
        """Delete watermark rows the stream has delivered (no-op for messages)."""
        if self.table is not None and payloads:
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE kind = %s AND payload = ANY(%s)").format(
                    sql.Identifier(*self.table)
                ),
                (WATERMARK, payloads),
            )


def choose(conn: psycopg.Connection[Any], config: PostgresSourceConfig, pipeline: str) -> Channel:
    """The channel for this role: the configured signal table, else messages when the role may
    emit them, else the default signal table ``<first schema>.<pipeline>_cdc_signal``."""
    if config.snapshot_signal_table:
        schema, _, name = config.snapshot_signal_table.partition(".")
        return Channel(pipeline, (schema, name))
    row = conn.execute(_EMIT_FUNCTION).fetchone()
    if row is not None and row[0]:
        return Channel(pipeline)
    return Channel(pipeline, (config.table_pairs()[0][0], f"{pipeline}_cdc_signal"))


def ensure_table(conn: psycopg.Connection[Any], channel: Channel) -> None:
    """Create the signal table when missing.

    Raises:
        SourceFatal: the role may not create it; the message gives the statement to run.
    """
    if channel.table is None:
        return
    statement = sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, kind text NOT NULL,"
        " payload text NOT NULL, created timestamptz NOT NULL DEFAULT now())"
    ).format(sql.Identifier(*channel.table))
    try:
        conn.execute(statement)
    except psycopg.errors.ReadOnlySqlTransaction as exc:
        found = conn.execute(sql.SQL("SELECT to_regclass(%s)"), (channel.table_id,)).fetchone()
        if found and found[0] is not None:
            return  # created on the primary: the standby has it too
        what = f"cannot create the snapshot signal table; run: {statement.as_string(conn)}"
        raise SourceFatal(read_only_problem(what)) from exc
    except psycopg.errors.InsufficientPrivilege as exc:
        row = conn.execute(_EMIT_FUNCTION).fetchone()
        function = row[1] if row else "pg_logical_emit_message(boolean, text, text)"
        raise SourceFatal(
            f"the role may not emit logical messages nor create the snapshot signal table "
            f"({exc.diag.message_primary}); a DBA must run: {statement.as_string(conn)}; "
            f"and GRANT SELECT, INSERT, DELETE on it (or GRANT EXECUTE ON FUNCTION {function})"
        ) from exc


def in_recovery(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn``'s server is a standby (read-only)."""
    row = conn.execute(sql.SQL("SELECT pg_is_in_recovery()")).fetchone()
    return bool(row and row[0])


def signal_rows(
    events: list[Change], markers: list[Marker], signal_table: tuple[str, str]
) -> tuple[list[Change], list[Marker]]:
    """Take the signal table's rows out of the batch, as markers where they were.

    The batch's changes are its events, or the records the stream wrote for them
    (:class:`~connectors.postgres.snapshot.written.WrittenChange`). The hooks' markers (logical
    messages) counted the batch's changes with those rows in them: they move back by the rows
    taken out before them.
    """
    table_id = ".".join(signal_table)  # a written change's table, as its topic names it
    kept: list[Change] = []
    kept_before: list[int] = []  # per change of the batch: how many were kept before it
    # (place in the batch, marker): a hook's message came just before its change index.
    placed: list[tuple[float, Marker]] = []
    for at, change in enumerate(events):
        kept_before.append(len(kept))
        found = _signal_row(change, signal_table, table_id)
        if found is None:
            kept.append(change)
            continue
        after, position = found
        if after is None:
            continue  # the reader's clean-up deletes
        kind, payload = after.get("kind"), str(after.get("payload"))
        parsed = parse(payload.encode()) if kind == WATERMARK else None
        if parsed is not None:
            placed.append((at, (len(kept), parsed[0], parsed[1], position)))
        elif kind == SIGNAL:
            placed.append((at, (len(kept), SIGNAL, payload, position)))
    for index, kind, payload, lsn in markers:
        moved = kept_before[index] if index < len(kept_before) else len(kept)
        placed.append((index - 0.5, (moved, kind, payload, lsn)))
    placed.sort(key=lambda entry: entry[0])
    return kept, [marker for _, marker in placed]


def _signal_row(
    change: Change, signal_table: tuple[str, str], table_id: str
) -> tuple[Mapping[str, Any] | None, int] | None:
    """A signal table change's inserted row (``None`` for another operation) and position;
    ``None`` for another table's change."""
    if isinstance(change, WrittenChange):
        return change.signal_row(table_id)
    source = change.source
    if source.table != signal_table[1] or source.schema != signal_table[0]:
        return None
    return (change.after if change.op is Op.CREATE else None), source.position
