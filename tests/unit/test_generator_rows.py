"""The generator source's rows for ``cdc verify`` (``read_rows``): what its stream leaves in
each table, as the stream's records carry them under the pipeline's envelope."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.contracts.errors import SourceFatal
from cdc.contracts.events import Op
from cdc.contracts.source import SourceContext
from cdc.envelope.encode import to_records
from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE, EnvelopeOptions
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.sink_task import payload_of
from cdc.support.logging import get_logger
from connectors.generator import GeneratorSource, GeneratorSourceConfig, GeneratorSourcePlugin

TABLES = ["public.a", "public.b", "public.c"]


def streamed_rows(
    config: GeneratorSourceConfig, tmp_path: Path, options: EnvelopeOptions
) -> dict[str, dict[str, Any]]:
    """Each table's rows after the source's whole stream, polled as the runtime polls it."""
    log = EmbeddedLog(tmp_path / "log")
    source = GeneratorSource(config, SourceContext("gen", log, get_logger()))
    source.open({})
    rows: dict[str, dict[str, Any]] = {t: {} for t in TABLES}
    try:
        while batch := source.poll(50, 0.01).events:
            for event in batch:
                table = rows[f"{event.source.schema}.{event.source.table}"]
                key = orjson.dumps(event.key).decode()
                if event.op is Op.DELETE:
                    table.pop(key, None)
                    continue
                value = payload_of(to_records(event, "gen", 0, options)[0].value or b"null")
                table[key] = value["after"]
    finally:
        source.close()
        log.close()
    return rows


@pytest.mark.parametrize("options", [READABLE, DEBEZIUM_DEFAULTS], ids=["readable", "debezium"])
def test_read_rows_are_what_the_stream_leaves(tmp_path: Path, options: EnvelopeOptions) -> None:
    config = GeneratorSourceConfig(
        type="generator", tables=TABLES, changes=1000, keys=40, transaction_size=7
    )
    expected = streamed_rows(config, tmp_path, options)
    assert all(len(rows) > 10 for rows in expected.values())  # deletes left some rows out
    assert any(len(rows) < 40 for rows in expected.values())
    for table in TABLES:
        schema, name = table.split(".")
        read = GeneratorSourcePlugin.read_rows(config, schema, name, envelope=options)
        assert {orjson.dumps(k).decode(): row for k, row in read} == expected[table]
    assert list(GeneratorSourcePlugin.read_rows(config, "public", "absent")) == []


def test_a_generator_without_an_end_has_no_rows_to_verify() -> None:
    config = GeneratorSourceConfig(type="generator", tables=TABLES)
    with pytest.raises(SourceFatal, match="without an end"):
        list(GeneratorSourcePlugin.read_rows(config, "public", "a"))
