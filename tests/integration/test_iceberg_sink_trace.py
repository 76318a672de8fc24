"""``read_key`` (``cdc trace``) of the Iceberg sink on a real catalog and warehouse (SQLite
catalog, local files): a key's row and ``_cdc_pos``, a deleted key's row of its own."""

from __future__ import annotations

from pathlib import Path

from sinks.iceberg import IcebergSink, IcebergSinkConfig
from sinks.iceberg.plugin import IcebergSinkPlugin
from tests.integration.keyed_records import PIPELINE, Records, apply, context
from tests.integration.read_key_kit import check, scenario


def test_read_key(tmp_path: Path) -> None:
    config = IcebergSinkConfig(
        name="lake",
        catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"},
        warehouse=str(tmp_path / "wh"),
        commit_interval_s=0,
    )
    sink = IcebergSink(config, context(sink="lake"))
    sink.open()
    try:
        apply(sink, Records()(*scenario()))
    finally:
        sink.close()
    check(IcebergSinkPlugin, config, PIPELINE)
