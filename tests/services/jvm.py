"""Finding Java and the Maven-built jar folders that the Kafka and Mongo servers run from."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.services.common import ServiceError, ServiceUnavailableError

#: ``tests/``: the Maven projects live in ``tests/kafka`` and ``tests/mongo``.
TESTS_DIR = Path(__file__).resolve().parents[1]


def find_java() -> str | None:
    """Returns the ``java`` launcher: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def ensure_jars(project: str, marker_glob: str, env_override: str) -> Path:
    """Returns ``tests/<project>/target/lib``, building it with Maven first if it is missing.

    Args:
        project: Maven project folder under ``tests/`` (``kafka`` or ``mongo``).
        marker_glob: A glob that must match in the lib dir for it to count as built.
        env_override: Environment variable that may name another lib dir.

    Returns:
        The folder holding every jar of the classpath.

    Raises:
        ServiceUnavailableError: No Java, or the jars are missing and Maven is not installed.
        ServiceError: The Maven build failed.
    """
    if find_java() is None:
        raise ServiceUnavailableError("java not found (apt-get install openjdk-17-jdk-headless)")
    override = os.environ.get(env_override)
    lib = Path(override) if override else TESTS_DIR / project / "target" / "lib"
    if any(lib.glob(marker_glob)):
        return lib
    mvn = shutil.which("mvn")
    if override or mvn is None:
        raise ServiceUnavailableError(
            f"{lib} has no {marker_glob} and Maven is missing: run `make install`"
        )
    proc = subprocess.run(
        [mvn, "-q", "-B", "package"],
        cwd=TESTS_DIR / project,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if proc.returncode != 0 or not any(lib.glob(marker_glob)):
        raise ServiceError(f"mvn package in tests/{project} failed:\n{proc.stdout}{proc.stderr}")
    return lib
