"""Names a package exports, imported when first used (PEP 562).

A plugin package's ``__init__`` names its config, its plugin and its implementation. Importing
them all at once made every ``cdc`` command pay for every client library its pipeline names
(psycopg's replication stack, DuckDB, redis, pymongo, pyiceberg...), where most commands need
only the configs: ``cdc validate`` of a pipeline with a PostgreSQL source and a DuckDB and a Redis
sink took 1.5 s of CPU, most of it imports it never used (2026-12-07).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports each name of ``where`` (name ->
    module) when it is first asked for, and keeps it."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:  # a submodule, or a name that does not exist: the usual error
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


class Attribute:
    """A class attribute that is ``module``'s ``name``, imported when first read: a plugin's
    hot function (read once by the runtime, then called per record) without a wrapper call."""

    def __init__(self, module: str, name: str) -> None:
        self._module = module
        self._name = name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        # An AttributeError out of here would read as "no such attribute" to getattr(plugin,
        # name, None), and a command would say the sink cannot do what it can, hiding the real
        # error (a client library of another version, a name gone from the module).
        try:
            return getattr(importlib.import_module(self._module), self._name)
        except AttributeError as exc:
            raise ImportError(f"{self._module}.{self._name}: {exc}") from exc
