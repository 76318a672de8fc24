"""The ``jsonl`` sink's section of a pipeline file."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from cdc.config.models import SinkConfig
from cdc.transforms.unwrap import UnwrapOptions, unwrap_options


class JsonlSinkConfig(SinkConfig):
    """A directory of JSON-lines files.

    Attributes:
        path: the directory: one ``<topic>.jsonl`` file per topic and the state file.
        unwrap: write each change's row state instead of its envelope, as Debezium's
            ``ExtractNewRecordState`` does (:mod:`cdc.transforms.unwrap`), under its option
            names (``delete.tombstone.handling.mode``, ``add.fields``,
            ``add.fields.prefix``); ``true`` takes its defaults, ``false`` or absent writes
            the envelopes.
    """

    type: Literal["jsonl"] = "jsonl"
    path: str
    unwrap: UnwrapOptions | None = None

    @field_validator("unwrap", mode="before")
    @classmethod
    def _unwrap(cls, value: Any) -> Any:
        return unwrap_options(value)
