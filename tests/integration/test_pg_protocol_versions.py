"""The options the source sends are the ones the server under test takes: the highest pgoutput
protocol it speaks (one more is refused), and every option of
:func:`connectors.postgres.replication.versions.stream_options` its version offers."""

from __future__ import annotations

import pytest

from connectors.postgres.replication.connection import (
    ReplicationCommandError,
    ReplicationConnection,
)
from connectors.postgres.replication.versions import ORIGIN_NONE_VERSION, stream_options
from tests.integration.pg_source_kit import query, sql

SLOT, PUBLICATION = "proto_slot", "proto_pub"


def _start(dsn: str, options: dict[str, str]) -> None:
    repl = ReplicationConnection(dsn, "the test server", 10)
    try:
        repl.start(SLOT, 0, options)
    finally:
        repl.close()


@pytest.fixture
def slot_db(pg_db: str) -> str:
    sql(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY)",
        f"CREATE PUBLICATION {PUBLICATION} FOR TABLE t",
    )
    repl = ReplicationConnection(pg_db, "the test server", 10)
    try:
        repl.create_slot(SLOT)
    finally:
        repl.close()
    return pg_db  # the fixture's teardown drops the slot with the database


def test_the_server_takes_every_option_its_version_offers(slot_db: str) -> None:
    version = int(query(slot_db, "SHOW server_version_num")[0][0])
    for stream_in_progress in (False, True):
        options = stream_options(
            version,
            PUBLICATION,
            stream_in_progress=stream_in_progress,
            skip_replicated=version >= ORIGIN_NONE_VERSION,
        )
        _start(slot_db, options)


def test_the_protocol_is_the_highest_the_server_speaks(slot_db: str) -> None:
    version = int(query(slot_db, "SHOW server_version_num")[0][0])
    options = stream_options(version, PUBLICATION)
    proto = int(options["proto_version"])
    higher = {**options, "proto_version": str(proto + 1)}
    with pytest.raises(ReplicationCommandError, match=rf"only supports? protocol {proto} or"):
        _start(slot_db, higher)


def test_parallel_streaming_is_refused_before_protocol_4(slot_db: str) -> None:
    # Why 16+ gets protocol 4: the server refuses streaming = parallel below it (and 14 and
    # 15 have no parallel mode at all).
    version = int(query(slot_db, "SHOW server_version_num")[0][0])
    options = {**stream_options(version, PUBLICATION), "proto_version": "2"}
    with pytest.raises(ReplicationCommandError, match="streaming"):
        _start(slot_db, {**options, "streaming": "parallel"})
