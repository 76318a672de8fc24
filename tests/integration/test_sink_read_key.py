"""``read_key`` of the DuckDB, PostgreSQL, Redis and search sinks on their real stores: a key's
row and the position stored with it, a deleted key's position, nothing for an unknown key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cdc.cli.trace_sinks import held_state
from cdc.contracts.sink import SinkContext
from cdc.support.logging import get_logger
from sinks.duckdb import DuckDBSinkConfig
from sinks.duckdb.plugin import DuckDBSinkPlugin
from sinks.duckdb.sink import DuckDBSink
from sinks.postgres.plugin import PostgresSinkPlugin
from sinks.redis import RedisSinkConfig
from sinks.redis.plugin import RedisSinkPlugin
from sinks.search import SearchSinkConfig, SearchSinkPlugin
from sinks.search.sink import SearchSink
from tests.integration.keyed_records import PIPELINE, Records, apply, context
from tests.integration.postgres_sink_kit import Harness
from tests.integration.read_key_kit import check, scenario


def _written(sink: Any) -> None:
    sink.open()
    try:
        apply(sink, Records()(*scenario()))
    finally:
        sink.close()


def test_duckdb(tmp_path: Path) -> None:
    config = DuckDBSinkConfig(name="wh", type="duckdb", path=str(tmp_path / "wh.duckdb"))
    _written(DuckDBSink(config, context()))
    check(DuckDBSinkPlugin, config, PIPELINE)


def test_search(tmp_path: Path) -> None:
    config = SearchSinkConfig(name="search", type="search", path=str(tmp_path / "search"))
    _written(SearchSink(config, context()))
    check(SearchSinkPlugin, config, PIPELINE)


def test_redis(redis_server: Any) -> None:
    redis_server.start()
    config = RedisSinkConfig(name="cache", type="redis", url=redis_server.url, key_prefix="rk")
    _written(RedisSinkPlugin.create(config, context(sink="cache")))
    check(RedisSinkPlugin, config, PIPELINE)


def test_postgres(pg_db: str) -> None:
    harness = Harness(pg_db)
    try:
        harness.apply(*scenario())
    finally:
        harness.close()
    check(PostgresSinkPlugin, harness.config, PIPELINE)


class _NoSchemas:
    """No table schema published (a MongoDB source's collections)."""

    def get(self, schema: str, table: str) -> None:
        return None


def test_a_duckdb_document_table_is_read_whole(tmp_path: Path) -> None:
    config = DuckDBSinkConfig(name="wh", type="duckdb", path=str(tmp_path / "wh.duckdb"))
    tables = [("public", "items")]
    _written(DuckDBSink(config, SinkContext(PIPELINE, "wh", tables, _NoSchemas(), get_logger())))
    # read_key cannot look a document table's keys up: the trace falls back to read_rows.
    assert held_state(config, PIPELINE, "public.items", {"id": 1}) == (
        False,
        ({"id": 1, "name": "b"}, None),
    )
    assert held_state(config, PIPELINE, "public.items", {"id": 2}) == (False, None)
