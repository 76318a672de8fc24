"""A mask plugin found the way users install one: a distribution declaring a ``cdc.masks``
entry point (written to a temporary directory on ``sys.path``, as ``pip install`` would lay it
out), not a stub of the lookup."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc.config.pipeline import parse
from cdc.contracts.errors import ConfigError
from cdc.transforms.masks import available_plugins, compile_mask

PLUGIN = """
def reverse(options):
    suffix = options.get("suffix", "")
    return lambda text: text[::-1] + suffix
"""


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[None]:
    (tmp_path / "cdc_test_masks.py").write_text(PLUGIN)
    info = tmp_path / "cdc_test_masks-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cdc-test-masks\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[cdc.masks]\nreverse = cdc_test_masks:reverse\n")
    sys.path.insert(0, str(tmp_path))
    available_plugins.cache_clear()
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("cdc_test_masks", None)
        available_plugins.cache_clear()


def pipeline(mask: str) -> str:
    return (
        "version: 1\nname: p\nsource:\n  type: postgres\n  dsn: host=db\n  tables:\n"
        f"    - {{name: public.u, mask: {{email: {mask}}}}}\n"
    )


def test_an_installed_mask_plugin_masks(installed: None) -> None:
    assert "reverse" in available_plugins()
    mask = compile_mask("plugin", plugin="reverse", options={"suffix": "!"})
    assert mask("abc") == "cba!"
    parsed = parse(pipeline("{type: plugin, name: reverse, options: {suffix: '!'}}"), env={})
    spec = parsed.source.tables[0].mask["email"]
    assert (spec.name, spec.options) == ("reverse", {"suffix": "!"})


def test_an_unknown_mask_plugin_is_a_config_error(installed: None) -> None:
    with pytest.raises(ConfigError) as info:
        parse(pipeline("{type: plugin, name: nope}"), env={})
    (where, message), *_ = info.value.problems
    assert where == "source.tables[0].mask.email"
    assert "unknown mask plugin 'nope'" in message and "reverse" in message
