"""Throwaway servers (PostgreSQL, Redis, Kafka, MongoDB) for tests, benchmarks and the demo.

Importable without pytest. Each module offers a ``Local*`` class that runs a real server from
the machine's binaries or Maven-built jars, and a ``*_server()`` function that prefers an address
from the environment, then a local server, then testcontainers.
"""

from tests.services.common import (
    RestartUnsupportedError,
    ServiceError,
    ServiceUnavailableError,
)

__all__ = ["RestartUnsupportedError", "ServiceError", "ServiceUnavailableError"]
