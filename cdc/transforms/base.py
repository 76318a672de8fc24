"""What a transform is: a plugin of the ``cdc.transforms`` entry point group.

A transform sees one change event at a time, after the source's filters and masks and before
the event is encoded for the log (:class:`cdc.contracts.events.ChangeEvent`), and returns the event,
a changed event, several events, or none. It must not change the event it is given (build a new
one: :func:`dataclasses.replace`), and its answer must depend on the event alone: the same
transform runs over the stream, every snapshot, and, in ``cdc verify``, over the source's
current rows read as ``r`` events.

Three optional parts, with :class:`BaseTransform`'s defaults:

* :meth:`BaseTransform.table`: the table whose topic a table's events go to (``route``), so the
  runtime knows every topic up front and each sink its tables;
* :meth:`BaseTransform.schema`: the published shape of the events it returns
  (:class:`cdc.contracts.schema.TableSchema`), so sinks type the columns it adds or renames;
* :attr:`BaseTransform.applies_to_rows`: ``False`` for a transform whose result on a row read
  now is not what the stream gave for it (one that reads the clock, or counts), which makes
  ``cdc verify`` report its tables as not verifiable rather than compare them.

A plugin names a config model (extending :class:`TransformConfig`; validated with the pipeline
file, errors under ``transforms[N]``) and a ``create(config, context)`` that builds the
transform without connecting anywhere: it is built by ``cdc validate`` too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cdc.contracts.errors import CdcError, Fatal, RecordError
from cdc.contracts.events import ChangeEvent
from cdc.contracts.schema import TableSchema

if TYPE_CHECKING:  # annotations only: reading a pipeline's file needs no logging set-up
    from cdc.support.logging import Logger

#: What :meth:`Transform.apply` may return.
Applied = ChangeEvent | Sequence[ChangeEvent] | None


class TransformConfig(BaseModel):
    """Fields every transform's section has; a plugin's model extends it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str


class MatchingConfig(TransformConfig):
    """A transform that applies to the tables ``match`` accepts (a regular expression matched
    against the whole ``schema.table`` of the event's topic; every table when omitted)."""

    match: str | None = None

    @field_validator("match")
    @classmethod
    def _compiles(cls, match: str | None) -> str | None:
        if match is not None:
            try:
                re.compile(match)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return match


@dataclass(frozen=True)
class TransformContext:
    """What the runtime gives a transform when building it.

    Attributes:
        pipeline: the pipeline's name (topic names are ``<pipeline>.<schema>.<table>``).
        logger: bound to the pipeline.
        tables: ``schema.table`` of every table whose events reach the transform: the
            source's tables, as the transforms before it named them (:meth:`BaseTransform.table`).
    """

    pipeline: str
    logger: Logger
    tables: tuple[str, ...] = ()


class Transform(Protocol):
    """A transform (see the module docstring)."""

    def apply(self, event: ChangeEvent) -> Applied:
        """The event, a changed event, several events, or ``None`` (dropped)."""
        ...


class TransformPlugin(Protocol):
    """What a ``cdc.transforms`` entry point names."""

    config_model: type[TransformConfig]

    @staticmethod
    def create(config: Any, context: TransformContext) -> Transform: ...


class BaseTransform:
    """The optional parts of a transform, as they are when it leaves them out."""

    #: ``cdc verify`` may run it over the source's rows and compare the result with the sinks.
    applies_to_rows: bool = True

    def apply(self, event: ChangeEvent) -> Applied:
        raise NotImplementedError

    def table(self, table: str) -> str:
        """The ``schema.table`` whose topic the events of ``table`` go to after this one."""
        return table

    def schema(self, schema: TableSchema) -> TableSchema:
        """The published shape of this transform's events of a table of shape ``schema``."""
        return schema


class Matcher:
    """Which tables a :class:`MatchingConfig` transform applies to, remembered per table."""

    __slots__ = ("_known", "_pattern")

    def __init__(self, match: str | None) -> None:
        self._pattern = None if match is None else re.compile(match)
        self._known: dict[str, bool] = {}

    def __call__(self, table: str) -> bool:
        found = self._known.get(table)
        if found is None:
            found = self._pattern is None or self._pattern.fullmatch(table) is not None
            self._known[table] = found
        return found


def topic_table_id(event: ChangeEvent) -> str:
    """``schema.table`` of the topic ``event`` goes to."""
    schema, table = event.topic_table
    return f"{schema}.{table}"


class TransformError(RecordError):
    """A transform raised on one event: the pipeline's ``bad_records`` policy decides."""


class TransformShapeError(CdcError, Fatal):
    """A transform refused a table's shape (:meth:`BaseTransform.schema`): no change of the
    table could be written as the sinks expect, so the pipeline stops with it."""


#: Field names a transform may add (Debezium's and SQL's: letters, digits, ``_``).
FIELD_NAME = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
