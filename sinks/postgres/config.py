"""The ``postgres`` sink's section of a pipeline file."""

from __future__ import annotations

from typing import Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict
from pydantic import ConfigDict, Field, SecretStr, field_validator

from cdc.config.models import SinkConfig
from cdc.support.redact import redact

#: PostgreSQL's longest identifier, in bytes; a longer one is silently cut by the server.
MAX_IDENTIFIER = 63


class PostgresSinkConfig(SinkConfig):
    """``type: postgres``: a PostgreSQL database kept equal to the source's tables.

    Attributes:
        dsn: libpq connection string or URL of the target; a secret, never logged.
        schema: the target schema the tables (and the sink's ``_cdc_*`` tables) are made in;
            created if missing.
        table_names: source ``schema.table`` -> target table name; a table not named keeps its
            source table name.
        mode: ``current`` keeps the current state of each table; ``history`` also keeps every
            version in ``<table>__history`` (slowly changing dimension, type 2).
        connect_timeout_s: libpq's ``connect_timeout``.
    """

    # ``schema`` is the file's name for it; as a field name it would shadow BaseModel.schema.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: Literal["postgres"] = "postgres"
    dsn: SecretStr
    schema_: str = Field(default="public", alias="schema", min_length=1, max_length=MAX_IDENTIFIER)
    table_names: dict[str, str] = Field(default_factory=dict)
    mode: Literal["current", "history"] = "current"
    connect_timeout_s: int = Field(default=10, ge=1)

    @field_validator("dsn")
    @classmethod
    def _parses(cls, dsn: SecretStr) -> SecretStr:
        text = dsn.get_secret_value()
        try:
            conninfo_to_dict(text)
        except psycopg.ProgrammingError as exc:  # libpq's message can quote a piece of it
            reason = redact(str(exc), text)
            raise ValueError(f"not a valid libpq connection string: {reason}") from None
        return dsn

    @field_validator("table_names")
    @classmethod
    def _names(cls, names: dict[str, str]) -> dict[str, str]:
        for source, target in names.items():
            if "." not in source:
                raise ValueError(f"{source!r}: name the source table as schema.table")
            if not target or len(target.encode()) > MAX_IDENTIFIER:
                raise ValueError(f"{source!r}: target name must be 1 to 63 bytes")
        return names

    def target_table(self, table: tuple[str, str]) -> str:
        """The target table's name for source ``table``."""
        return self.table_names.get(f"{table[0]}.{table[1]}", table[1])
