"""The pipeline's ``transforms:``, in order, as one object the runtime and ``cdc verify`` use.

Events go through each transform in turn (several events out of one go on to the next
transform each); published table shapes and table names go through the same steps, so the
runtime knows every topic and each sink every table before any event arrives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cdc.contracts import plugins
from cdc.contracts.events import ChangeEvent, topic_name
from cdc.contracts.schema import TableSchema
from cdc.transforms.base import (
    Transform,
    TransformConfig,
    TransformContext,
    TransformError,
    TransformShapeError,
)
from cdc.transforms.filters import digest

if TYPE_CHECKING:
    from cdc.support.logging import Logger


class TransformChain:
    """The transforms of a pipeline, in order.

    Args:
        steps: ``(label, config, transform)`` of each, ``label`` as the file names it
            (``transforms[0] (route)``).
    """

    def __init__(self, steps: Sequence[tuple[str, TransformConfig, Transform]]) -> None:
        self._steps = list(steps)
        self._transforms = [(label, t) for label, _, t in steps]

    def __bool__(self) -> bool:
        return bool(self._steps)

    def __len__(self) -> int:
        return len(self._steps)

    def apply(self, event: ChangeEvent) -> list[ChangeEvent]:
        """The events ``event`` becomes after every transform (none, one or several).

        Raises:
            TransformError: a transform raised or returned something that is not events; the
                message names the transform, the table and the error.
        """
        events = [event]
        for label, transform in self._transforms:
            out: list[ChangeEvent] = []
            for current in events:
                out.extend(_applied(label, transform, current))
            events = out
            if not events:
                break
        return events

    def apply_all(self, events: Iterable[ChangeEvent]) -> list[ChangeEvent]:
        """:meth:`apply` of each event, in order."""
        out: list[ChangeEvent] = []
        for event in events:
            out.extend(self.apply(event))
        return out

    def table(self, table: str) -> str:
        """The ``schema.table`` whose topic the events of source table ``table`` go to."""
        for _, transform in self._transforms:
            table = getattr(transform, "table", _same)(table)
        return table

    def topic(self, pipeline: str, schema: str, table: str) -> str:
        """The topic the events of source table ``schema.table`` go to."""
        return topic_name(pipeline, *self.table(f"{schema}.{table}").split(".", 1))

    def schema(self, schema: TableSchema) -> TableSchema:
        """A source table's published shape as its transformed events have it.

        Raises:
            TransformShapeError: a transform raised on the shape; the message names it and
                the table.
        """
        table = f"{schema.schema}.{schema.table}"
        for label, transform in self._transforms:
            try:
                schema = getattr(transform, "schema", _same)(schema)
            except Exception as exc:
                raise TransformShapeError(
                    f"{label} failed on the shape of {table}: {type(exc).__name__}: {exc}"
                ) from exc
        return schema

    def unverifiable(self) -> list[str]:
        """The transforms ``cdc verify`` cannot apply to the source's rows (their labels)."""
        return [
            label
            for label, transform in self._transforms
            if not getattr(transform, "applies_to_rows", True)
        ]

    def fingerprint(self) -> str:
        """A digest of the transforms' configuration: what the log stores to notice a change."""
        return digest([config.model_dump(mode="json") for _, config, _ in self._steps])


def _same(value: Any) -> Any:
    return value


def _applied(label: str, transform: Transform, event: ChangeEvent) -> list[ChangeEvent]:
    try:
        result = transform.apply(event)
    except Exception as exc:
        raise TransformError(
            f"{label} failed on a change of {event.table_id}: {type(exc).__name__}: {exc}"
        ) from exc
    if result is None:
        return []
    if isinstance(result, ChangeEvent):
        return [_unencoded(result, event)]
    if isinstance(result, list | tuple) and all(isinstance(e, ChangeEvent) for e in result):
        return [_unencoded(e, event) for e in result]
    raise TransformError(
        f"{label} returned {type(result).__name__} for a change of {event.table_id}: "
        "a transform returns a ChangeEvent, a list of them, or None"
    )


def _unencoded(result: ChangeEvent, given: ChangeEvent) -> ChangeEvent:
    """``result`` without the record its source wrote for it, unless it is the event given.

    A pre-encoded event (:attr:`ChangeEvent.encoded`) is written as those bytes, whatever its
    fields say: a transform that built a new event with ``dataclasses.replace`` and changed a
    row but kept ``encoded`` would see its change silently lost.
    """
    if result is given or result.encoded is None:
        return result
    return replace(result, encoded=None)


class TransformRefused(ValueError):
    """A transform plugin's ``create`` refused its settings.

    Attributes:
        path: the transform's YAML path, ``transforms[N]``.
        reason: the plugin's message (with the exception's class unless a ``ValueError``).
    """

    def __init__(self, index: int, type_name: str, cause: Exception) -> None:
        self.path = f"transforms[{index}]"
        message = str(cause) or type(cause).__name__
        if not isinstance(cause, ValueError):  # an unexpected failure: say of which kind
            message = f"{type(cause).__name__}: {message}"
        self.reason = f"the {type_name} transform refused its settings: {message}"
        super().__init__(f"{self.path} ({type_name}): {message}")


def build_chain(
    configs: Sequence[TransformConfig],
    pipeline: str,
    tables: Sequence[str] = (),
    logger: Logger | None = None,
) -> TransformChain:
    """The chain of validated ``configs`` (each built by its plugin's ``create``) for a
    pipeline capturing ``tables``.

    Each transform's context lists the tables as they reach it: the source's, renamed by the
    transforms before it (a second ``route`` sees the first one's targets, so it knows which
    tables it merges).

    Raises:
        TransformRefused: a plugin's ``create`` refused its settings for these tables.
        PluginNotFound: no ``cdc.transforms`` entry point has a config's ``type``.
    """
    from cdc.support.logging import get_logger  # at build: reading a file sets up no logging

    bound = logger or get_logger(pipeline=pipeline)
    reaching = list(dict.fromkeys(tables))
    steps: list[tuple[str, TransformConfig, Transform]] = []
    for index, config in enumerate(configs):
        plugin = plugins.load(plugins.TRANSFORM_GROUP, config.type)
        label = f"transforms[{index}] ({config.type})"
        try:
            transform = plugin.create(config, TransformContext(pipeline, bound, tuple(reaching)))
        # A plugin is anyone's code: whatever its create() raises is its verdict on the
        # settings, reported under its YAML path (``cdc validate`` exits 2), never a traceback.
        except Exception as exc:
            raise TransformRefused(index, config.type, exc) from exc
        steps.append((label, config, transform))
        rename = getattr(transform, "table", _same)
        reaching = list(dict.fromkeys(rename(t) for t in reaching))
    return TransformChain(steps)


EMPTY = TransformChain(())
