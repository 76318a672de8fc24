"""The ``envelope:`` block: Debezium's option names and values, readable defaults, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cdc.config.pipeline import load as load_pipeline
from cdc.contracts.errors import ConfigError
from cdc.contracts.events import Op
from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE, EnvelopeOptions


def test_the_defaults_are_the_readable_settings() -> None:
    assert READABLE.properties() == {
        "time.precision.mode": "isostring",
        "decimal.handling.mode": "string",
        "interval.handling.mode": "string",
        "binary.handling.mode": "base64",
        "hstore.handling.mode": "json",
        "skipped.operations": "none",
        "tombstones.on.delete": True,
        "provide.transaction.metadata": False,
        "schemas.enable": False,
    }
    assert READABLE.skipped == frozenset()


def test_debezium_properties_copied_over_are_read_under_their_names() -> None:
    options = EnvelopeOptions.model_validate(
        {
            "time.precision.mode": "adaptive_time_microseconds",
            "decimal.handling.mode": "precise",
            "binary.handling.mode": "base64-url-safe",
            "skipped.operations": "t, d",
            "tombstones.on.delete": "false",  # a properties file's string
            "schemas.enable": "true",
        }
    )
    assert options.time_precision_mode == "adaptive_time_microseconds"
    assert options.skipped == {Op.TRUNCATE, Op.DELETE}
    assert options.skipped_operations == "d,t"
    assert options.tombstones_on_delete is False and options.schemas_enable is True
    assert DEBEZIUM_DEFAULTS.skipped == {Op.TRUNCATE}


def test_the_stored_encoding_leaves_out_what_only_chooses_records() -> None:
    encoding = DEBEZIUM_DEFAULTS.encoding()
    assert "skipped.operations" not in encoding and "tombstones.on.delete" not in encoding
    assert encoding["decimal.handling.mode"] == "precise" and encoding["schemas.enable"] is True


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"time.precision.mode": "nanos"}, "time.precision.mode"),
        ({"skipped.operations": "x"}, "unknown operation x"),
        ({"skipped.operations": ""}, "skipped.operations"),
        ({"topic.prefix": "dbz"}, "topic.prefix"),  # Debezium's, but not an envelope option
    ],
)
def test_a_bad_option_is_named(properties: dict[str, str], named: str) -> None:
    with pytest.raises(ValidationError, match=named.replace(".", r"\.")):
        EnvelopeOptions.model_validate(properties)


def test_the_pipeline_file_carries_the_block_and_reports_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    base = "version: 1\nname: p\nsource: {type: generator, tables: [s.t]}\n"
    path.write_text(base + "envelope: {decimal.handling.mode: double, schemas.enable: true}\n")
    pipeline = load_pipeline(path)
    assert pipeline.envelope.decimal_handling_mode == "double"
    assert pipeline.envelope.schemas_enable is True
    path.write_text(base + "envelope: {interval.handling.mode: iso}\n")
    with pytest.raises(ConfigError) as failure:
        load_pipeline(path)
    assert "envelope.interval.handling.mode" in str(failure.value)
