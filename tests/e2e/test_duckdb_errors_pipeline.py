"""A DuckDB sink's stop through ``cdc run`` on a real PostgreSQL: it names the sink, the table,
the column, the value and the fix, and no value the configuration masks (here the key, hashed:
the record's key is not printed).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import yaml

from tests.e2e.cli_helpers import start_run, stop, wait_for
from tests.e2e.sinks_kit import execute

KEY = "0123456789abcdef0123456789abcdef"


def _stops(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    events = []
    for line in log.read_text().splitlines():
        if '"sink.stopped"' in line:
            events.append(orjson.loads(line[line.index("{") :]))
    return events


def test_a_stop_names_sink_table_column_value_and_fix_and_no_masked_value(
    pg_db: str, tmp_path: Path
) -> None:
    execute(
        pg_db,
        "CREATE TABLE prices (id text PRIMARY KEY, ssn text NOT NULL, p numeric(6,2))",
        "INSERT INTO prices VALUES ('cust-4711', 'SSN-RAW-1', 1.25), "
        "('cust-4712', 'SSN-RAW-2', 'NaN')",
    )
    data = {
        "version": 1,
        "name": "errs",
        "source": {
            "type": "postgres",
            "dsn": pg_db,
            "tables": [{"name": "public.prices", "mask": {"id": "hash", "ssn": "redact"}}],
            "mask_key": "${CDC_MASK_KEY}",
        },
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "sinks": [{"name": "warehouse", "type": "duckdb", "path": str(tmp_path / "wh.duckdb")}],
    }
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump(data, sort_keys=False))
    log = tmp_path / "run.log"
    run = start_run(pipeline, tmp_path, {"CDC_MASK_KEY": KEY})
    try:
        wait_for(lambda: bool(_stops(log)), 60, process=run, log=log)
    finally:
        stop(run)
    (stopped,) = _stops(log)
    message = str(stopped["error"])
    for part in (
        "sink warehouse ",
        "table public.prices, column p (numeric(6,2)): value 'NAN' cannot be stored as DuckDB "
        "DECIMAL(6,2)",
        "Fix: ",
        "--reset-table public.prices",
        "bad_records: dead_letter",
    ):
        assert part in message, (part, message)
    text = log.read_text()
    for hidden in ("cust-4712", "SSN-RAW", "key {"):
        assert hidden not in message, (hidden, message)
    assert "cust-47" not in text and "SSN-RAW" not in text
