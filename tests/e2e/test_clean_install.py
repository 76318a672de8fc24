"""A clean install works: a new virtualenv, the project installed from this checkout, nothing else.

The system Python of a developer's or CI's machine may carry packages a user's machine lacks (it
once hid an undeclared ``click``). This test builds a virtualenv without system site-packages,
installs the checkout into it, runs ``cdc --help`` and imports every module of the four packages
from outside the checkout, so only what the install declared can be found; where cargo is, the
native extensions must be in the install too. The sinks whose client is an extra
(``pip install "cdc-connectors[iceberg]"``) are left out of the import, and naming one in a
pipeline file must be a config error that gives that pip command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cdc", "connectors", "sinks", "snapshots")
# The sinks whose client library is an optional extra of the same name: a base install lacks it.
OPTIONAL_SINKS = ("opensearch", "http", "iceberg")
# The Rust crates of the two native extensions (pyproject.toml's setuptools-rust modules).
#: The cargo target folder that `make pip` builds both native crates into.
CARGO_TARGET = Path("build") / "cargo"
NATIVE = ("connectors.postgres._native", "cdc.log.embedded._native")

# Imports each native extension, and prints whether the row encoder takes the native path.
IMPORT_NATIVE = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
from connectors.postgres.types import row_encoder
print(row_encoder.available())
"""

# Imports every module of the installed packages but the optional sinks' (argv: the packages,
# then "--", then the optional sinks' packages) and prints where the first one came from.
IMPORT_ALL = """
import importlib, pkgutil, sys
split = sys.argv.index("--")
tops, optional = sys.argv[1:split], tuple(p + "." for p in sys.argv[split + 1:])
names = []
for top in tops:
    package = importlib.import_module(top)
    names.append(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        if not (info.name + ".").startswith(optional):
            names.append(info.name)
for name in names:
    importlib.import_module(name)
print(len(names), importlib.import_module("cdc").__file__)
"""


def _clean_env() -> dict[str, str]:
    # Nothing may reach the checkout or another environment's packages through the environment.
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the checkout installed (with its ``testing`` extra) and nothing more."""
    work = tmp_path_factory.mktemp("clean-venv")
    # A copy of the tracked tree, so the build leaves nothing in the checkout and sees no
    # developer's leftovers (an editable install's in-place extensions, build folders).
    source = work / "src"
    shutil.copytree(
        REPO_ROOT,
        source,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "target", "*.so", "__pycache__"),
    )
    _copy_cargo_targets(source)
    root = work / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(root)
    python = root / "bin" / "python"
    # PyO3 configures the crates for PYO3_PYTHON, which setuptools-rust sets to the building
    # interpreter unless it is given: this suite's, as it was for the checkout's build, so
    # cargo's cache applies. Both are virtualenvs of one base Python: the same configuration.
    env = {**_clean_env(), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYO3_PYTHON": sys.executable}
    env["CARGO_TARGET_DIR"] = str(source / CARGO_TARGET)  # as make pip builds: one folder
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{source}[testing]"],
        check=True,
        env=env,
        timeout=900,
    )
    return root


def _copy_cargo_targets(source: Path) -> None:
    """Give the copy the checkout's cargo build output (``make pip`` left it), a cache only.

    Cargo fingerprints a workspace's crates by their paths relative to it and by their sources'
    contents and times (kept by the copy), so it reuses what is fresh and rebuilds the rest: a
    release build of both crates is most of this module's time otherwise.
    """
    target = REPO_ROOT / CARGO_TARGET  # make pip builds both crates there (CARGO_TARGET_DIR)
    if target.is_dir():
        shutil.copytree(target, source / CARGO_TARGET, symlinks=True)


def test_the_installed_cdc_command_runs(clean_venv: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(clean_venv / "bin" / "cdc"), "--help"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for command in ("validate", "run", "status", "snapshot", "verify", "tail"):
        assert command in result.stdout


def test_every_module_imports_from_the_clean_install(clean_venv: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            str(clean_venv / "bin" / "python"),
            "-c",
            IMPORT_ALL,
            *PACKAGES,
            "--",
            *(f"sinks.{name}" for name in OPTIONAL_SINKS),
        ],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    count, cdc_file = result.stdout.split()
    assert int(count) > 50
    # The modules came from the virtualenv, not from the checkout or the system's packages.
    assert Path(cdc_file).is_relative_to(clean_venv), cdc_file


def test_the_clean_virtualenv_sees_no_system_packages(clean_venv: Path, tmp_path: Path) -> None:
    # The premise of the two tests above: a package only the system Python has is not importable.
    probe = "import sys; print(sys.prefix != sys.base_prefix, any('site-packages' in p and "
    probe += f"p.startswith({sys.base_prefix!r}) for p in sys.path))"
    result = subprocess.run(
        [str(clean_venv / "bin" / "python"), "-c", probe],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.split() == ["True", "False"], result.stdout + result.stderr


def test_the_native_extensions_are_in_the_clean_install(clean_venv: Path, tmp_path: Path) -> None:
    # They are optional (no Rust toolchain, no extensions): with cargo here they must be built.
    if shutil.which("cargo") is None:
        pytest.skip("no Rust toolchain: the install leaves the native extensions out")
    result = subprocess.run(
        [str(clean_venv / "bin" / "python"), "-c", IMPORT_NATIVE, *NATIVE],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True"], result.stdout + result.stderr


def test_the_optional_sinks_are_the_extras_of_their_names() -> None:
    # What the tests above leave out is exactly what pyproject.toml declares as sink extras.
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    sinks = set(project["entry-points"]["cdc.sinks"])
    extras = set(project["optional-dependencies"])
    assert sorted(sinks & extras) == sorted(OPTIONAL_SINKS)


@pytest.mark.parametrize("sink", OPTIONAL_SINKS)
def test_a_sink_without_its_extra_is_a_config_error_with_the_pip_command(
    clean_venv: Path, tmp_path: Path, sink: str
) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "version: 1\nname: shop\n"
        "source: {type: generator, tables: [public.orders], changes: 10}\n"
        f"sinks:\n  - {{name: out, type: {sink}}}\n"
    )
    result = subprocess.run(
        [str(clean_venv / "bin" / "cdc"), "validate", str(pipeline)],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert f'pip install "cdc-connectors[{sink}]"' in output, output
    assert "Traceback" not in output, output
