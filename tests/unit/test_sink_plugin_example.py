"""The example third-party sink (examples/cdc-sink-sqlite) keeps up with the plugin interface.

Its own tests (the conformance kit, a pipeline through ``cdc run`` and ``cdc verify``) run in
``make test`` through ``make example-plugin``, against the package installed as a user installs
it: that is the main guard. These checks fail sooner and say why: a method the ``Sink``
protocol gained or renamed, an optional hook the runtime no longer looks up by that name, an
entry point that no longer names the plugin, an import of what is not an interface, or the
Makefile no longer running the example's tests.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from cdc.config.models import SinkConfig
from cdc.contracts.sink import Sink, SinkPlugin

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cdc-sink-sqlite"
SOURCE = EXAMPLE / "src"


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    """The example's package, from its source (whether or not it is installed here)."""
    sys.path.insert(0, str(SOURCE))
    try:
        for name in [m for m in sys.modules if m.split(".")[0] == "cdc_sink_sqlite"]:
            del sys.modules[name]
        yield importlib.import_module("cdc_sink_sqlite")
    finally:
        sys.path.remove(str(SOURCE))


def protocol_methods(protocol: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(member)
    }


def parameters(signature: inspect.Signature) -> list[str]:
    return [p.name for p in signature.parameters.values()]


def test_the_sink_has_every_method_of_the_protocol(example: ModuleType) -> None:
    for name, wanted in protocol_methods(Sink).items():
        method = getattr(example.SqliteSink, name, None)
        assert callable(method), f"the example sink lacks Sink.{name}"
        assert parameters(inspect.signature(method)) == parameters(wanted), name


def test_the_plugin_has_what_a_plugin_must(example: ModuleType) -> None:
    plugin = example.SqliteSinkPlugin
    assert issubclass(plugin.config_model, SinkConfig)
    for name, wanted in protocol_methods(SinkPlugin).items():
        assert parameters(inspect.signature(getattr(plugin, name))) == parameters(wanted)


def looked_up_hooks() -> set[str]:
    """The optional attributes the core looks plugins and sinks up by:
    ``getattr(x, "name", default)`` anywhere under cdc/."""
    names = set()
    for path in (ROOT / "cdc").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) == 3
                and isinstance(node.args[1], ast.Constant)
            ):
                names.add(str(node.args[1].value))
    return names


def test_every_optional_hook_of_the_example_is_one_the_core_looks_up(example: ModuleType) -> None:
    hooks = looked_up_hooks()
    assert {"read_rows", "doctor", "reads_schemas"} <= hooks  # the lookup itself still works
    plugin_extras = set(vars(example.SqliteSinkPlugin)) - {"config_model", "create"}
    sink_extras = {
        n for n, v in vars(example.SqliteSink).items() if not callable(v) or isinstance(v, bool)
    }
    for name in {n for n in plugin_extras | sink_extras if not n.startswith("_")}:
        assert name in hooks, f"the example sets {name}, which nothing in cdc/ looks up"


def test_the_entry_point_names_the_plugin(example: ModuleType) -> None:
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["cdc.sinks"]["sqlite"]
    module, _, attribute = target.partition(":")
    assert getattr(importlib.import_module(module), attribute) is example.SqliteSinkPlugin


def test_the_example_imports_only_the_interface() -> None:
    """A third-party sink depends on ``cdc`` (contracts, config, testing), never on the sinks
    or connectors this project ships: those are no interface."""
    for path in [*SOURCE.rglob("*.py"), *(EXAMPLE / "tests").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for module in modules:
                top = module.split(".")[0]
                assert top not in {"sinks", "connectors", "snapshots", "tests"}, (path, module)


def test_make_test_runs_the_examples_tests() -> None:
    makefile = (ROOT / "Makefile").read_text()
    lane = re.search(r"^second-lane:\n((?:\t.*\n)+)", makefile, re.M)
    assert lane is not None and "example-plugin" in lane.group(1)
    recipe = re.search(r"^example-plugin:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe is not None
    assert "pip install" in recipe.group(1) and "-e " not in recipe.group(1)
    assert "pytest" in recipe.group(1)
