"""The postgres source's section of a pipeline file."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cdc.config.pipeline import parse
from cdc.contracts.errors import ConfigError
from connectors.postgres import PostgresSourceConfig


def _config(**extra: object) -> PostgresSourceConfig:
    base = {"type": "postgres", "dsn": "postgresql://u:secret@h/db", "tables": ["public.a"]}
    return PostgresSourceConfig.model_validate({**base, **extra})


def test_names_derive_from_the_pipeline_unless_given() -> None:
    config = _config()
    assert config.slot_name("shop") == "shop_slot"
    assert config.publication_name("shop") == "shop_pub"
    custom = _config(slot="s1", publication="p1")
    assert (custom.slot_name("shop"), custom.publication_name("shop")) == ("s1", "p1")


def test_dsn_is_secret() -> None:
    assert "secret" not in repr(_config())


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"slot": "Bad-Name"}, "slot"),
        ({"key_columns": {"public.b": ["id"]}}, "not captured"),
        ({"key_columns": {"public.a": []}}, "is empty"),
        ({"status_interval_s": 0}, "status_interval_s"),
    ],
)
def test_invalid_settings(extra: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        _config(**extra)


def test_pipeline_file_reports_source_errors_with_paths() -> None:
    text = (
        "version: 1\nname: shop\nsource:\n  type: postgres\n  dsn: x\n  tables: [public.a]\n"
        "  slot: BAD\n  unknown: 1\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse(text, env={})
    paths = {path for path, _ in caught.value.problems}
    assert {"source.slot", "source.unknown"} <= paths
