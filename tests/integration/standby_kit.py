"""A primary and its physical standby for the failover and decoding-on-standby tests.

Both are real servers from the local binaries (``$CDC_TEST_PG_VERSION``). A test module makes
its module-scoped fixture with :func:`pair_fixture` (a base backup takes seconds): tests that
share it must leave both servers running. A test that fails over (stops the primary, promotes
the standby) builds its own pair with :func:`primary_and_standby`.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
import pytest

from tests.services.common import ServiceUnavailableError, in_ci
from tests.services.pg_binaries import find_bin_dir
from tests.services.postgres import LocalPostgres
from tests.services.standby import StandbyPostgres, StandbySnapshots, server_major


@dataclass
class Pair:
    """A running primary and its hot standby, and a database created on the primary."""

    primary: LocalPostgres
    standby: StandbyPostgres
    database: str

    @property
    def primary_dsn(self) -> str:
        return self.primary.dsn_for(dbname=self.database)

    @property
    def standby_dsn(self) -> str:
        return self.standby.dsn_for(dbname=self.database)

    def new_database(self) -> str:
        """A fresh database (created on the primary, replayed on the standby); becomes current."""
        self.database = self.primary.create_database(f"test_{uuid.uuid4().hex[:12]}")
        self.standby.wait_replayed()
        return self.database


def require_major(major: int, feature: str) -> None:
    """Skip unless the test binaries are PostgreSQL ``major`` or later (the version is the
    point of such a test, so the reason names it)."""
    try:
        bin_dir = find_bin_dir()
    except ServiceUnavailableError as exc:
        if in_ci():
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    if bin_dir is None:  # a server given by address or a container: no standby to make
        if in_ci():
            pytest.fail("no PostgreSQL server binaries here for a standby", pytrace=False)
        pytest.skip("no PostgreSQL server binaries here")
    found = server_major(bin_dir)
    if found < major:
        pytest.skip(f"{feature} needs PostgreSQL {major}+; these tests run PostgreSQL {found}")


def key_ops(p: Any, table: str, pipeline: str = "snp") -> dict[int, list[str]]:
    """Per key, the ops of its records in log order (``-`` for a tombstone)."""
    schema, _, name = table.partition(".")
    topic = f"{pipeline}.{schema}.{name}"
    ops: dict[int, list[str]] = defaultdict(list)
    for partition in sorted(p.log.end_offsets(topic)):
        for record in p.log.read(topic, partition, 0, 1_000_000):
            key = orjson.loads(record.key or b"{}")["id"]
            ops[key].append("-" if record.value is None else orjson.loads(record.value)["op"])
    return dict(ops)


def slots(dsn: str) -> list[str]:
    """The names of the server's replication slots."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT slot_name::text FROM pg_replication_slots").fetchall()
    return sorted(r[0] for r in rows)


def writes(dsn: str, ids: range, pause_s: float = 0.01) -> None:
    """Insert ``(id, 'v<id>')`` into ``t`` for each id, one transaction each."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in ids:  # one transaction each
            conn.execute("INSERT INTO t VALUES (%s, %s)", (i, f"v{i}"))
            time.sleep(pause_s)


@contextmanager
def primary_and_standby(sync_slots: bool = False) -> Iterator[Pair]:
    """A fresh primary, a standby of it and a database; ``pg_log_standby_snapshot()`` runs on
    the primary every half second meanwhile (slot creation on the standby waits for one)."""
    primary = LocalPostgres()
    standby: StandbyPostgres | None = None
    try:
        primary.start()
        database = primary.create_database(f"test_{uuid.uuid4().hex[:12]}")
        standby = StandbyPostgres(primary, sync_slots=sync_slots)
        standby.start()
        standby.wait_replayed()
        with StandbySnapshots(primary):
            yield Pair(primary, standby, database)
    finally:
        if standby is not None:
            standby.close()
        primary.close()


def pair_fixture(major: int, feature: str) -> Iterator[Pair]:
    """The body of a module-scoped fixture: a pair of PostgreSQL ``major``+ (else the test
    skips, naming ``feature`` and the version). In a test module::

        @pytest.fixture(scope="module")
        def pair() -> Iterator[Pair]:
            yield from pair_fixture(16, "logical decoding on a standby")
    """
    require_major(major, feature)
    with primary_and_standby() as pair:
        yield pair
