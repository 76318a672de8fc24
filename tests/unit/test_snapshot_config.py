"""Snapshot settings of the PostgreSQL source."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from connectors.postgres import PostgresSourceConfig

BASE = {"type": "postgres", "dsn": "postgresql://localhost/db", "tables": ["public.t"]}


def test_defaults() -> None:
    config = PostgresSourceConfig.model_validate(BASE)
    assert (config.snapshot, config.snapshot_workers, config.snapshot_chunk_rows) == (
        "initial",
        2,
        50_000,
    )
    assert config.snapshot_key_columns == {}


@pytest.mark.parametrize(
    "extra",
    [
        {"snapshot_workers": 0},
        {"snapshot_chunk_rows": 0},
        {"snapshot": "sometimes"},
        {"snapshot_key_columns": {"public.other": ["id"]}},
    ],
)
def test_bad_values_are_refused(extra: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        PostgresSourceConfig.model_validate({**BASE, **extra})
