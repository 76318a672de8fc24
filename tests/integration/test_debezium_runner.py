"""The real Debezium runs here: its embedded engine writes its records as JSON lines.

Proves the groundwork of issue 14's differential tests (``tests/services/debezium.py`` and the
``tests/debezium`` runner): Debezium 3.6.1 snapshots a small table and streams an insert, an
update and a delete, and the records it writes hold the ops, keys and values PostgreSQL has.

They need the jars ``make jars`` builds in ``tests/debezium/target`` and run in CI like the
other real-server tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from tests.services.debezium import run_debezium

TABLE = """
CREATE TABLE items (
    id int PRIMARY KEY, name text NOT NULL, amount numeric(10,2), seen timestamptz, tags int[]
)
"""
ROWS = """
INSERT INTO items VALUES
    (1, 'one', 1.50, '2024-01-02 03:04:05.5+00', '{1,2}'),
    (2, 'two', NULL, NULL, '{}')
"""


def _prepare(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute(ROWS)


def _stream(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO items VALUES (3, 'three', -0.25, '1999-12-31 23:59:59+00', NULL)")
        conn.execute("UPDATE items SET name = 'THREE', amount = 10 WHERE id = 3")
        conn.execute("DELETE FROM items WHERE id = 1")


def _props(dbname: str, **extra: str) -> dict[str, str]:
    return {
        "slot.name": f"dbz_{dbname}",
        "publication.name": f"dbz_{dbname}",
        "table.include.list": "public.items",
        **extra,
    }


def test_debezium_snapshot_and_stream_readable(pg_db: str, tmp_path: Path) -> None:
    """Snapshot rows, then c/u/d and a tombstone, with string decimals and ISO times."""
    _prepare(pg_db)
    records = _run_readable(pg_db, tmp_path)

    assert {r["topic"] for r in records} == {"dbz.public.items"}
    ops = [(r["value"] or {}).get("op") for r in records]
    assert ops == ["r", "r", "c", "u", "d", None]
    assert [r["key"] for r in records] == [{"id": k} for k in (1, 2, 3, 3, 1, 1)]
    values = [r["value"] for r in records]
    _check_snapshot_rows(values[0], values[1])
    _check_stream_rows(*values[2:])
    # The properties file holds the password; Debezium's log must not.
    password = str(conninfo_to_dict(pg_db).get("password", ""))
    if password:
        assert password not in (tmp_path / "debezium.log").read_text()


def _run_readable(dsn: str, workdir: Path) -> list[dict[str, Any]]:
    """Debezium under the readable settings: the two snapshot rows, then ``_stream``'s changes."""
    dbname = conninfo_to_dict(dsn)["dbname"]
    props = _props(
        str(dbname),
        **{
            "decimal.handling.mode": "string",
            "time.precision.mode": "isostring",
            "key.converter.schemas.enable": "false",
            "value.converter.schemas.enable": "false",
        },
    )
    return run_debezium(
        dsn,
        props,
        expect=6,
        timeout_s=240,
        workdir=workdir,
        during=lambda: _stream(dsn),
        ready=2,
    )


def _check_snapshot_rows(snap: dict[str, Any], second: dict[str, Any]) -> None:
    assert snap["after"] == {
        "id": 1,
        "name": "one",
        "amount": "1.50",
        "seen": "2024-01-02T03:04:05.500000Z",
        "tags": [1, 2],
    }
    assert snap["before"] is None
    assert snap["source"]["snapshot"] == "first"
    assert second["after"] == {
        "id": 2,
        "name": "two",
        "amount": None,
        "seen": None,
        "tags": [],
    }


def _check_stream_rows(
    create: dict[str, Any], update: dict[str, Any], delete: dict[str, Any], tombstone: Any
) -> None:
    assert create["after"] == {
        "id": 3,
        "name": "three",
        "amount": "-0.25",
        "seen": "1999-12-31T23:59:59.000000Z",
        "tags": None,
    }
    assert create["source"]["snapshot"] == "false"
    assert update["before"] is None  # REPLICA IDENTITY DEFAULT: no old row
    assert update["after"]["name"] == "THREE" and update["after"]["amount"] == "10.00"
    # Under DEFAULT identity Debezium's delete carries every column: the nullable non-key ones
    # null, a NOT NULL one its type's empty value ("" for text), as observed.
    assert delete["before"] == {"id": 1, "name": "", "amount": None, "seen": None, "tags": None}
    assert delete["after"] is None
    assert tombstone is None
    for r in (create, update, delete):
        source: dict[str, Any] = r["source"]
        assert source["connector"] == "postgresql" and source["table"] == "items"
        assert isinstance(source["lsn"], int) and isinstance(source["txId"], int)


def test_debezium_defaults_write_connect_schemas(pg_db: str, tmp_path: Path) -> None:
    """Debezium's defaults: the JsonConverter's {"schema", "payload"}, precise decimals as bytes."""
    _prepare(pg_db)
    dbname = conninfo_to_dict(pg_db)["dbname"]
    records = run_debezium(pg_db, _props(str(dbname)), expect=2, timeout_s=240, workdir=tmp_path)

    key, value = records[0]["key"], records[0]["value"]
    assert key["payload"] == {"id": 1}
    assert key["schema"] == {
        "type": "struct",
        "fields": [{"type": "int32", "optional": False, "field": "id"}],
        "optional": False,
        "name": "dbz.public.items.Key",
    }
    assert value["schema"]["name"] == "dbz.public.items.Envelope"
    after = {f["field"]: f for f in value["schema"]["fields"]}["after"]
    assert after["name"] == "dbz.public.items.Value"
    fields = {f["field"]: f for f in after["fields"]}
    # Optionality follows the column's nullability, not the key alone.
    assert fields["name"] == {"type": "string", "optional": False, "field": "name"}
    assert fields["amount"]["optional"] is True
    assert fields["amount"]["name"] == "org.apache.kafka.connect.data.Decimal"
    assert fields["amount"]["parameters"] == {"scale": "2", "connect.decimal.precision": "10"}
    assert fields["seen"]["name"] == "io.debezium.time.ZonedTimestamp"
    payload = value["payload"]
    assert payload["op"] == "r"
    # 1.50 at scale 2: the unscaled 150 as big-endian two's complement bytes, base64.
    assert payload["after"]["amount"] == "AJY="
    assert payload["after"]["seen"] == "2024-01-02T03:04:05.500000Z"
