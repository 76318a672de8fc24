"""Session-wide service fixtures: real servers, started only when a test asks for one.

Each server comes from its environment variable when set (``CDC_TEST_PG_DSN``,
``CDC_TEST_REDIS_URL``, ``CDC_TEST_KAFKA_BOOTSTRAP``, ``CDC_TEST_MONGO_URI``), else is started
from local binaries, else from testcontainers. A missing service skips the test on a developer's
machine and fails it in CI (``CI=true``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from tests.services.common import ServiceError, ServiceUnavailableError, in_ci

T = TypeVar("T")


def _acquire(factory: Callable[[], T]) -> T:
    try:
        return factory()
    except ServiceUnavailableError as exc:
        if in_ci():
            pytest.fail(f"service missing in CI: {exc}", pytrace=False)
        pytest.skip(str(exc))


def _serve(factory: Callable[[], Any]) -> Iterator[Any]:
    server = _acquire(factory)
    try:
        yield server
    finally:
        server.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs PostgreSQL ``pg``, from its fixtures, and every test under
    ``tests/e2e`` ``e2e``: CI's versions lane selects with them (``make pytest-pg-versions``)."""
    for item in items:
        if "pg_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.pg)
        if item.path.parent.name == "e2e":
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A PostgreSQL server with ``wal_level=logical`` (a ``PostgresServer``): Debian's 15, or
    the version ``CDC_TEST_PG_VERSION`` names (14 to 18)."""
    from tests.services.postgres import postgres_server

    yield from _serve(postgres_server)


@pytest.fixture
def pg_db(pg_server: Any) -> Iterator[str]:
    """A fresh database for one test; yields its superuser DSN.

    Teardown drops the database's replication slots (a leaked slot pins WAL forever), then the
    database itself.
    """
    # A test that stopped the shared server and failed before starting it again must not take
    # every later test down with it (a no-op when running, or for a server given by address).
    pg_server.start()
    name = f"test_{uuid.uuid4().hex[:12]}"
    pg_server.create_database(name)
    try:
        yield pg_server.dsn_for(dbname=name)
    finally:
        pg_server.drop_database(name)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Any]:
    """A Redis server (a ``RedisServer``; ``.url`` is ``redis://127.0.0.1:PORT/0``)."""
    from tests.services.redis import redis_server as factory

    yield from _serve(factory)


@pytest.fixture(scope="session")
def opensearch_server() -> Iterator[Any]:
    """A single-node OpenSearch (``.url``), from ``CDC_TEST_OPENSEARCH_URL`` or the jars."""
    from tests.services.opensearch import opensearch_server as factory

    yield from _serve(factory)


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[Any]:
    """A single-node Kafka 4 broker in KRaft mode (``.bootstrap_servers``)."""
    from tests.services.kafka import kafka_server as factory

    yield from _serve(factory)


@pytest.fixture(autouse=True)
def _kafka_serving(request: pytest.FixtureRequest) -> None:
    """Before each test that uses the session's broker: it serves (started again when a test
    stopped it and failed before restarting it), or the test fails at once saying why, rather
    than waiting out its timeouts on ``Connection refused`` as every later one would."""
    if "kafka_server" not in request.fixturenames:
        return
    server = request.getfixturevalue("kafka_server")
    try:
        server.ensure_serving()
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def mongo_server() -> Iterator[Any]:
    """A MongoDB-protocol server with change streams (``.uri``)."""
    from tests.services.mongo import mongo_server as factory

    yield from _serve(factory)
