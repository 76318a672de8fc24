"""Our records' shape against the real Debezium 3.6.1's, through ``cdc run`` on PostgreSQL.

The workload of ``tests/debezium/capture.py`` (its two tables, snapshot rows and streamed
changes) runs through a pipeline with one captured setting's ``envelope:`` block; the records
are compared, parsed, with ``tests/debezium/expected/<setting>.jsonl``: per topic and in order,
the ops, keys, tombstones, truncates, which of ``before``/``after`` are there and their columns,
the envelope's and the ``source`` block's keys in order, ``source.snapshot`` markers, ``txId``
and ``lsn`` presence, ``sequence``'s shape, and the ``{"schema", "payload"}`` wrapper with the
schema names. Values are not compared: their encodings are the VALUES work's, and times and
positions differ from run to run anyway.

Documented deviations this test allows: ``source.version``; snapshot rows are compared by
marker order, as our chunks read a table in key order and Debezium in physical order. With
``provide.transaction.metadata`` (not in the captured settings) the blocks and BEGIN/END
records are checked against each other, and a sink must not take the transaction topic for a
table.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.contracts.errors import LogError
from cdc.envelope.options import DEBEZIUM_DEFAULTS
from cdc.log.embedded import EmbeddedLog
from cdc.testing import wait_until
from tests.debezium import capture, workload
from tests.e2e.cli_helpers import start_run, stop

PIPELINE = "dbz"
TABLES = ("tricky", "tricky_full")
EXPECTED = Path(capture.__file__).parent / "expected"


def _pipeline(tmp_path: Path, dsn: str, setting: str, transactions: bool) -> Path:
    props = capture.SETTINGS[setting]
    # Debezium's defaults (skipped.operations=t...) where the setting says nothing, as there
    envelope: dict[str, Any] = DEBEZIUM_DEFAULTS.properties()
    envelope.update({k: v for k, v in props.items() if ".converter." not in k})
    envelope["schemas.enable"] = props["value.converter.schemas.enable"]
    if transactions:
        envelope["provide.transaction.metadata"] = "true"
    lines = [
        "version: 1",
        f"name: {PIPELINE}",
        "source:",
        "  type: postgres",
        f"  dsn: '{dsn}'",
        # The values table too, as captured: it is snapshotted last, which marks the others.
        f"  tables: [{', '.join(workload.CAPTURED)}]",
        "  snapshot_workers: 1",  # tables in order, as Debezium reads them
        "log:",
        "  type: embedded",
        f"  path: {tmp_path / 'log'}",
        "sinks:",
        "  - name: files",
        "    type: jsonl",
        f"    path: {tmp_path / 'files'}",
        "envelope:",
        *(
            f"  {k}: {orjson.dumps(v).decode() if isinstance(v, bool) else v}"
            for k, v in envelope.items()
        ),
    ]
    path = tmp_path / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _ours(log_dir: Path, topic: str) -> list[dict[str, Any]]:
    log = EmbeddedLog(log_dir)
    out: list[dict[str, Any]] = []
    try:
        for partition in sorted(log.end_offsets(topic)):
            offset = 0
            while records := log.read(topic, partition, offset, 10_000):
                out += [
                    {"topic": topic, "key": _load(r.key), "value": _load(r.value)} for r in records
                ]
                offset = records[-1].offset + 1
    finally:
        log.close()
    return out


def _load(data: bytes | None) -> Any:
    return None if data is None else orjson.loads(data)


def _expected(setting: str) -> dict[str, list[dict[str, Any]]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for line in (EXPECTED / f"{setting}.jsonl").read_text().splitlines():
        record = orjson.loads(line)
        if _incremental(record):
            continue  # the online re-snapshot: the differential suite runs that part
        by_topic.setdefault(record["topic"], []).append(record)
    return by_topic


def _incremental(record: dict[str, Any]) -> bool:
    value = _payload(record["value"])
    return value is not None and value["source"]["snapshot"] == "incremental"


def _payload(data: Any) -> Any:
    if isinstance(data, dict) and data.keys() == {"schema", "payload"}:
        return data["payload"]
    return data


def _schema_name(data: Any) -> Any:
    if isinstance(data, dict) and data.keys() == {"schema", "payload"}:
        schema = data["schema"]
        return (schema or {}).get("name"), [f["field"] for f in (schema or {}).get("fields", [])]
    return "no wrapper"


def _shape(record: dict[str, Any]) -> dict[str, Any]:
    """What must match Debezium's, encodings and run-to-run values left out."""
    key, value = record["key"], record["value"]
    shape: dict[str, Any] = {"key": _payload(key), "key_schema": _schema_name(key)}
    if value is None:
        return shape | {"value": None}
    envelope = _payload(value)
    source = envelope["source"]
    return shape | {
        "value_schema": _schema_name(value),
        "envelope_keys": list(envelope),
        "op": envelope["op"],
        "before": None if envelope["before"] is None else sorted(envelope["before"]),
        "after": None if envelope["after"] is None else sorted(envelope["after"]),
        "source_keys": list(source),
        "snapshot": source["snapshot"],
        "where": (source["schema"], source["table"]),
        "has_tx_lsn": (source["txId"] is not None, source["lsn"] is not None),
        "sequence_head": None if source["sequence"] is None else source["sequence"][:2],
        "transaction": envelope["transaction"],
    }


def _comparable(records: list[dict[str, Any]]) -> tuple[list[Any], Counter[Any]]:
    """Streamed records in order; snapshot rows' markers in order and their keys as a set."""
    shapes = [_shape(r) for r in records]
    rows = [s for s in shapes if s.get("op") == "r"]
    keys = Counter(orjson.dumps(s.pop("key")) for s in rows)
    return [*rows, *(s for s in shapes if s.get("op") != "r")], keys


def _run(pg_db: str, tmp_path: Path, setting: str, transactions: bool) -> dict[str, list[Any]]:
    capture.prepare(pg_db)
    pipeline = _pipeline(tmp_path, pg_db, setting, transactions)
    expected = _expected(setting)
    topics = [f"{PIPELINE}.public.{t}" for t in TABLES]
    log_dir = tmp_path / "log"
    process = start_run(pipeline, tmp_path)
    try:
        snapshot = workload.SNAPSHOT_RECORDS // 2

        def count(topic: str) -> int:
            try:
                return len(_ours(log_dir, topic))
            except LogError:  # no log or no topic yet
                return 0

        wait_until(
            lambda: all(count(t) >= snapshot for t in topics), 120, 0.5, describe="the snapshot"
        )
        capture.stream(pg_db)
        wait_until(
            lambda: all(count(t) >= len(expected[t]) for t in topics),
            120,
            0.5,
            describe="the changes",
        )
        files = tmp_path / "files"
        wait_until(
            lambda: len(list(files.glob("*.jsonl"))) >= len(topics),
            60,
            0.5,
            describe="the sink's files",
        )
        # A window, not a wait: nothing more is due, and a late extra record would show in the
        # comparison; no event marks "nothing more came".
        time.sleep(1.0)
    finally:
        code, _ = stop(process)
    assert code == 0, (tmp_path / "run.log").read_text()[-3000:]
    ours = {t: _ours(log_dir, t) for t in topics}
    if transactions:
        ours[f"{PIPELINE}.transaction"] = _ours(log_dir, f"{PIPELINE}.transaction")
    return ours


@pytest.mark.parametrize("setting", ["defaults", "readable", "readable_schemas"])
def test_records_have_debeziums_shape(pg_db: str, tmp_path: Path, setting: str) -> None:
    ours = _run(pg_db, tmp_path, setting, transactions=False)
    for topic, theirs in _expected(setting).items():
        assert _comparable(ours[topic]) == _comparable(theirs), topic


def test_transaction_metadata_blocks_match_begin_and_end(pg_db: str, tmp_path: Path) -> None:
    ours = _run(pg_db, tmp_path, "readable", transactions=True)
    changes = [
        _payload(r["value"])
        for t in TABLES
        for r in ours[f"{PIPELINE}.public.{t}"]
        if r["value"] is not None
    ]
    assert all(c["transaction"] is None for c in changes if c["op"] == "r")
    blocks = [c["transaction"] for c in changes if c["op"] != "r"]
    assert blocks and all(b is not None for b in blocks)
    records = [r["value"] for r in ours[f"{PIPELINE}.transaction"]]
    begins = {r["id"] for r in records if r["status"] == "BEGIN"}
    ends = {r["id"]: r for r in records if r["status"] == "END"}
    by_id = Counter(b["id"] for b in blocks)
    assert begins == set(ends) == set(by_id)
    for tx_id, end in ends.items():
        assert end["event_count"] == by_id[tx_id]
        assert sum(c["event_count"] for c in end["data_collections"]) == by_id[tx_id]
        orders = sorted(b["total_order"] for b in blocks if b["id"] == tx_id)
        assert orders == list(range(1, by_id[tx_id] + 1))
    # the sink wrote its tables, never the transaction topic
    files = {p.name for p in (tmp_path / "files").glob("*.jsonl")}
    assert files and not any("transaction" in name for name in files)
