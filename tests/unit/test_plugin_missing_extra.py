"""A sink whose client library is not installed is a config error that gives the pip command.

The plugins live in a throwaway distribution written to a temporary folder on ``sys.path``, as
pip would install a third-party package: its entry point names a module that imports a client
that does not exist.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc.contracts import plugins
from cdc.contracts.errors import PluginNotFound

GROUP = "cdc.sinks"


def _install(root: Path, *, extras: list[str]) -> None:
    (root / "fakesink_pkg").mkdir()
    (root / "fakesink_pkg" / "__init__.py").write_text("")
    (root / "fakesink_pkg" / "needs_client.py").write_text("import no_such_client_lib  # noqa\n")
    # A plugin that imports its client only when it runs, and names it in ``requires``.
    (root / "fakesink_pkg" / "lazy_client.py").write_text(
        "class Plugin:\n    requires = ('json', 'no_such_client_lib.sub')\n"
    )
    (root / "fakesink_pkg" / "lazy_present.py").write_text(
        "class Plugin:\n    requires = ('json',)\n"
    )
    dist = root / "fakesink_dist-1.0.dist-info"
    dist.mkdir()
    metadata = ["Metadata-Version: 2.1", "Name: fakesink-dist", "Version: 1.0"]
    metadata += [f"Provides-Extra: {extra}" for extra in extras]
    (dist / "METADATA").write_text("\n".join(metadata) + "\n")
    (dist / "entry_points.txt").write_text(
        "[cdc.sinks]\n"
        "fakeclient = fakesink_pkg.needs_client:Plugin\n"
        "fakeother = fakesink_pkg.needs_client:Plugin\n"
        "fakebroken = fakesink_pkg.gone:Plugin\n"
        "fakelazy = fakesink_pkg.lazy_client:Plugin\n"
        "fakepresent = fakesink_pkg.lazy_present:Plugin\n"
    )


@pytest.fixture
def fake_dist(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[None]:
    _install(tmp_path, extras=request.param)
    sys.path.insert(0, str(tmp_path))
    # The entry points read once per process: this test's distribution is new.
    plugins.load.cache_clear()
    plugins.available.cache_clear()
    plugins._installed.cache_clear()
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("fakesink_pkg")]:
            del sys.modules[name]
        plugins.load.cache_clear()
        plugins.available.cache_clear()
        plugins._installed.cache_clear()


@pytest.mark.parametrize("fake_dist", [["fakeclient"]], indirect=True)
def test_a_missing_client_names_the_extra_to_install(fake_dist: None) -> None:
    with pytest.raises(PluginNotFound) as caught:
        plugins.load(GROUP, "fakeclient")
    message = str(caught.value)
    assert "'no_such_client_lib'" in message
    assert 'pip install "fakesink-dist[fakeclient]"' in message


@pytest.mark.parametrize("fake_dist", [["fakeclient"]], indirect=True)
def test_without_an_extra_of_its_name_the_module_itself_is_named(fake_dist: None) -> None:
    with pytest.raises(PluginNotFound, match=r"pip install no_such_client_lib$"):
        plugins.load(GROUP, "fakeother")


@pytest.mark.parametrize("fake_dist", [[]], indirect=True)
def test_a_plugin_whose_own_module_is_gone_is_a_broken_install(fake_dist: None) -> None:
    with pytest.raises(PluginNotFound, match="broken install"):
        plugins.load(GROUP, "fakebroken")


@pytest.mark.parametrize("fake_dist", [["fakelazy"]], indirect=True)
def test_a_required_client_that_is_missing_is_the_same_error_without_an_import(
    fake_dist: None,
) -> None:
    with pytest.raises(PluginNotFound) as caught:
        plugins.load(GROUP, "fakelazy")
    message = str(caught.value)
    assert "'no_such_client_lib'" in message
    assert 'pip install "fakesink-dist[fakelazy]"' in message
    # Found, then: the plugin loads (its modules are looked for, not imported).
    assert plugins.load(GROUP, "fakepresent").requires == ("json",)
