"""The plugin sections of a pipeline file (``source``, each sink, each transform): each checked
by its plugin's own model, every problem with its YAML path (:mod:`cdc.config.pipeline`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from cdc.config.env import yaml_path
from cdc.config.keys import unknown_key_message
from cdc.contracts import plugins
from cdc.contracts.errors import PluginNotFound
from cdc.transforms.base import TransformConfig


def pydantic_problems(
    exc: ValidationError, prefix: tuple[int | str, ...] = (), model: type[BaseModel] | None = None
) -> list[tuple[str, str]]:
    """Each error with its YAML path; an unknown key with the closest key ``model`` (the one
    validated, at ``prefix``) allows there."""
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = [p for p in error["loc"] if not (isinstance(p, str) and p in ("embedded", "kafka"))]
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = unknown_key_message(model, error["loc"])
        problems.append((yaml_path((*prefix, *loc)), message))
    return problems


def plugin_section(
    group: str, section: Any, base: type[BaseModel], prefix: tuple[int | str, ...]
) -> tuple[Any, list[tuple[str, str]]]:
    if not isinstance(section, dict):
        return None, [(yaml_path(prefix), "must be a mapping")]
    kind = section.get("type")
    if not isinstance(kind, str):
        return None, [(yaml_path((*prefix, "type")), "a type is required")]
    try:
        model: type[BaseModel] = plugins.load(group, kind).config_model
    except PluginNotFound as exc:
        return None, [(yaml_path((*prefix, "type")), str(exc))]
    if not issubclass(model, base):
        return None, [(yaml_path((*prefix, "type")), f"plugin {kind!r} has an invalid config")]
    try:
        return model.model_validate(section), []
    except ValidationError as exc:
        return None, pydantic_problems(exc, prefix, model)


def transform_sections(raw: Any) -> tuple[list[TransformConfig], list[tuple[str, str]]]:
    """Each ``transforms`` item validated by its plugin's model."""
    configs: list[TransformConfig] = []
    problems: list[tuple[str, str]] = []
    for index, section in enumerate(raw if isinstance(raw, list) else []):
        config, sub = plugin_section(
            plugins.TRANSFORM_GROUP, section, TransformConfig, ("transforms", index)
        )
        problems.extend(sub)
        if config is not None:
            configs.append(config)
    return configs, problems
