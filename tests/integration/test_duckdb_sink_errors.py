"""What a DuckDB sink's stop says, through the real sink task over a real embedded log and DuckDB
file: the sink, the table, the column, the value (never a masked one) and the fix, for every way a
value can be refused (a decoder in Python, DuckDB's cast, JSON text that spoils the staged
document) and for a batch DuckDB refuses without a value to blame (its message quotes the
staged document: never echoed).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest

from cdc.contracts.errors import RecordError, SinkFatal
from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from cdc.contracts.sink import SinkContext
from cdc.envelope import encode as envelope
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.sink_task import SinkTask
from cdc.support.logging import get_logger
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig
from sinks.duckdb.errors import named, staging_failed
from tests.integration.duckdb_kit import PIPELINE, Schemas, event

TABLE = ("public", "bad")
TOPIC = f"{PIPELINE}.public.bad"
SECRET = "SECRET-1234"


def _stop(
    tmp_path: Path, columns: list[Column], rows: list[dict[str, Any]], masked: tuple[str, ...] = ()
) -> str:
    """Run the sink task over ``rows`` (creates of ``public.bad``) under ``bad_records: fail``;
    the message it stops with."""
    schemas = Schemas()
    schemas.publish("bad", *columns)
    log = EmbeddedLog(tmp_path / "log")
    log.ensure_topics([TOPIC])
    tx = log.begin()
    events = [event(Op.CREATE, {"id": r["id"]}, r, 5 + n, table="bad") for n, r in enumerate(rows)]
    tx.append([r for e in events for r in envelope.to_records(e, PIPELINE, now_ms=0)])
    tx.commit()
    hidden = {TABLE: frozenset(masked)}
    context = SinkContext(PIPELINE, "wh", [TABLE], schemas, get_logger(), hidden=hidden)
    config = DuckDBSinkConfig(name="wh", path=str(tmp_path / "wh.duckdb"))
    task = SinkTask(
        PIPELINE,
        "wh",
        log,
        lambda: DuckDBSink(config, context),
        [TOPIC],
        threading.Event(),
        get_logger(),
    )
    try:
        with pytest.raises(RecordError) as stopped:
            task.run()
    finally:
        log.close()
    return str(stopped.value)


@pytest.mark.parametrize(
    ("source_type", "bad", "why"),
    [
        # Decimal's own refusal was the whole message: [<class 'decimal.ConversionSyntax'>].
        ("numeric", "", "not a number"),
        ("numeric", "12,5", "not a number"),
        # DuckDB refused the whole staged document: Malformed JSON, and the document's text.
        ("json", "{not json", "no JSON document"),
        ("numeric(6,2)", "NaN", "Failed to cast value to decimal"),
        ("uuid", "nope", "UUID"),
        ("date", "2024-13-45", "date"),
    ],
)
def test_a_stop_names_sink_table_column_value_and_fix(
    tmp_path: Path, source_type: str, bad: str, why: str
) -> None:
    columns = [Column("id", "bigint", key=True), Column("v", source_type)]
    good = {"id": 1, "v": None}
    message = _stop(tmp_path, columns, [good, {"id": 2, "v": bad}])
    for part in (
        "sink wh ",
        "table public.bad",
        f"column v ({source_type})",
        'key {"id":2}',
        f"value {bad!r} cannot be stored as DuckDB",
        why,
        "Fix: ",
        "bad_records: dead_letter",
    ):
        assert part in message, (part, message)
    assert "Input:" not in message and "ConversionSyntax" not in message


def test_a_masked_column_or_key_is_named_but_its_value_never_shown(tmp_path: Path) -> None:
    columns = [
        Column("id", "text", key=True),
        Column("ssn", "date"),  # a mask plugin's value the column's type cannot take
        Column("note", "text"),
    ]
    rows = [{"id": "h-" + SECRET, "ssn": SECRET, "note": SECRET}]
    message = _stop(tmp_path, columns, rows, masked=("id", "ssn"))
    assert "table public.bad, column ssn (date): value (not shown: the column is masked)" in (
        message
    )
    assert SECRET not in message and "key" not in message.split("Fix:")[0]


def test_a_batch_refused_without_a_value_to_blame_names_sink_and_tables_not_data(
    tmp_path: Path,
) -> None:
    # No value is to blame here, so no real batch gives one: DuckDB's own refusal of a staged
    # document is raised by DuckDB itself, on a document holding a secret.
    con = duckdb.connect()
    with pytest.raises(duckdb.Error) as refused:
        con.execute('SELECT from_json_strict(?, \'{"a": "INTEGER"}\')', [f'{{"a": "{SECRET}"}}'])
    error = staging_failed(refused.value, ["public.other", "public.bad"])
    assert isinstance(error, SinkFatal)
    error = named(error, "wh")  # what the sink raises
    assert str(error).startswith("DuckDB sink wh: applying a batch of public.bad, public.other: ")
    assert SECRET not in str(error) and SECRET in str(refused.value)
