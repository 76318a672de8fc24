"""Suggestions for unknown keys of a pipeline file: ``source.tabels`` gets "did you mean
`tables`?".

Pydantic reports an unknown key with its location only; the keys that were allowed there are
found by walking the config models along that location (through optional values, lists, dicts
and unions, whose members may all have been tried), then the closest one by :mod:`difflib`.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

#: How alike a key must be to be suggested (difflib's ratio): ``tabels``/``tables`` is 0.83.
CUTOFF = 0.6


def unknown_key_message(model: type[BaseModel] | None, loc: Sequence[int | str]) -> str:
    """The message for the unknown key at ``loc`` (pydantic's, from ``model``'s root)."""
    key = loc[-1] if loc else ""
    allowed = allowed_keys(model, loc[:-1]) if model is not None else []
    close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=CUTOFF)
    if not close:
        return "unknown key"
    return f"unknown key; did you mean `{close[0]}`?"


def allowed_keys(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The keys the models at ``loc`` (below ``model``) accept."""
    candidates = [model]
    for part in loc:
        if isinstance(part, int):
            continue  # a list's item: the item models are candidates already
        deeper = [
            found
            for each in candidates
            for found in _models(_field_annotation(each, part))
            if _field_annotation(each, part) is not None
        ]
        # No model has that field: a union member's tag or a dict's key; the same models hold.
        candidates = deeper or candidates
    return sorted({key for each in candidates for key in _keys(each)})


def _keys(model: type[BaseModel]) -> list[str]:
    """The keys a file writes: a field's alias where it has one (``time.precision.mode``)."""
    return [_spelled(name, field) for name, field in model.model_fields.items()]


def _spelled(name: str, field: FieldInfo) -> str:
    alias = field.validation_alias if isinstance(field.validation_alias, str) else field.alias
    return alias or name


def _field_annotation(model: type[BaseModel], key: str) -> Any:
    for name, field in model.model_fields.items():
        if key in (name, _spelled(name, field)):
            return field.annotation
    return None


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation can hold: itself, or inside Optional, Union, list, dict."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is None or origin is typing.Literal:
        return []
    args = typing.get_args(annotation)
    if origin is dict or origin is types.MappingProxyType:
        args = args[1:]  # a dict's values, not its keys
    return [model for arg in args for model in _models(arg)]
