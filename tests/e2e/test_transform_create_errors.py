"""``cdc validate`` when a transform plugin's ``create()`` raises (issue 25's matrix work).

A third-party transform installed as users install one: a distribution on the path whose
``cdc.transforms`` entry point names a plugin, here one whose ``create`` raises. ``cdc validate``
must report it as a config error under the transform's YAML path, with the plugin's message,
and exit 2, never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tests.e2e.cli_helpers import cdc

PLUGIN = '''
class RaisingConfig:
    pass


class RaisingPlugin:
    """create() fails as a plugin's own code can: not with a ValueError."""

    @staticmethod
    def create(config, context):
        raise {error}("the lookup table {{}} is not loaded".format(config.type))
'''


def _install(root: Path, error: str) -> Path:
    """A distribution ``raising_transform`` with one ``cdc.transforms`` entry point."""
    site = root / "site"
    (site / "raising_transform-1.0.dist-info").mkdir(parents=True)
    (site / "raising_transform-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: raising-transform\nVersion: 1.0\n"
    )
    (site / "raising_transform-1.0.dist-info" / "entry_points.txt").write_text(
        "[cdc.transforms]\nraising = raising_transform:RaisingPlugin\n"
    )
    module = PLUGIN.format(error=error).replace(
        "class RaisingConfig:\n    pass\n",
        "from cdc.transforms.base import TransformConfig\n\n\n"
        "class RaisingConfig(TransformConfig):\n    pass\n",
    )
    module += "\nRaisingPlugin.config_model = RaisingConfig\n"
    (site / "raising_transform.py").write_text(module)
    return site


@pytest.mark.parametrize("error", ["RuntimeError", "KeyError", "ValueError"])
def test_a_transform_whose_create_raises_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    site = _install(tmp_path, error)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    pipeline = tmp_path / "pipeline.yaml"
    data = {
        "version": 1,
        "name": "tr",
        "source": {"type": "postgres", "dsn": "postgresql://u@127.0.0.1/db", "tables": ["t.t"]},
        "transforms": [
            {"type": "route", "match": "public\\.x", "topic": "public.y"},
            {"type": "raising"},
        ],
        "sinks": [{"name": "files", "type": "jsonl", "path": "out"}],
    }
    pipeline.write_text(yaml.safe_dump(data, sort_keys=False))
    result = cdc("validate", str(pipeline), cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output
    assert "transforms[1]" in output
    assert "the raising transform refused its settings" in output
    assert "the lookup table raising is not loaded" in output
    if error != "ValueError":
        assert f"{error}: " in output
