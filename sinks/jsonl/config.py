"""The ``jsonl`` sink's section of a pipeline file."""

from __future__ import annotations

from typing import Literal

from cdc.config import SinkConfig


class JsonlSinkConfig(SinkConfig):
    """A directory of JSON-lines files.

    Attributes:
        path: the directory: one ``<topic>.jsonl`` file per topic and the state file.
    """

    type: Literal["jsonl"] = "jsonl"
    path: str
