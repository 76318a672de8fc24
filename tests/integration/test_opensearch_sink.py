"""The OpenSearch sink against a real OpenSearch node (``opensearch_server``: the jars the
harness runs, or ``CDC_TEST_OPENSEARCH_URL``): the conformance kit, replays, reorderings,
deletes remembered by their version, composite keys, truncates, schema changes, ``cdc verify``'s
read-back and ``cdc search``.

Each test gets indexes of its own (a random prefix in the index template and the offsets index),
so the tests share one node.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from cdc.cli.main import main
from cdc.contracts.errors import SinkFatal
from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import Sink, SinkContext
from cdc.support.logging import get_logger
from cdc.testing.conformance import SinkConformance
from sinks.opensearch.client import connect
from sinks.opensearch.config import OpenSearchSinkConfig
from sinks.opensearch.documents import doc_id
from sinks.opensearch.plugin import OpenSearchSinkPlugin
from sinks.opensearch.sink import OpenSearchSink
from sinks.opensearch.versions import version
from tests.integration.duckdb_kit import ITEM_COLUMNS, PIPELINE, Schemas, event, item
from tests.services.opensearch import OpenSearchServer, sink_options


def _config(url: str, **extra: Any) -> OpenSearchSinkConfig:
    """A config of indexes of the test's own; ``**sink_options(server)`` for the test node."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    return OpenSearchSinkConfig(
        name="search",
        url=url,
        index=prefix + "-{pipeline}.{schema}.{table}",
        offsets_index=f"{prefix}-offsets",
        replicas=0,
        **extra,
    )


def auth_yaml(config: OpenSearchSinkConfig, indent: str = "    ") -> str:
    """The sink's ``username`` and ``password`` lines of a pipeline file, if it has them."""
    if config.username is None or config.password is None:
        return ""
    secret = orjson.dumps(config.password.get_secret_value()).decode()
    return (
        f"{indent}username: {orjson.dumps(config.username).decode()}\n{indent}password: {secret}\n"
    )


def _docs(config: OpenSearchSinkConfig, schema: str, table: str) -> dict[str, Any]:
    rows = OpenSearchSinkPlugin.read_rows(config, schema, table, pipeline=PIPELINE)
    return {key["_id"]: row for key, row in rows}


class TestOpenSearchConformance(SinkConformance):
    @pytest.fixture(autouse=True)
    def _target(self, opensearch_server: Any) -> None:
        self.config = _config(**sink_options(opensearch_server))

    def make_sink(self, context: SinkContext) -> Sink:
        return OpenSearchSink(self.config, context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        rows = OpenSearchSinkPlugin.read_rows(self.config, "public", "kit_items", pipeline="kit")
        return {row["id"]: row for _, row in rows}


class Harness:
    """An OpenSearch sink over the test node; ``apply`` writes and flushes as the runner does."""

    def __init__(self, server: OpenSearchServer) -> None:
        from tests.integration.duckdb_kit import Harness as Records

        self.config = _config(**sink_options(server))
        self.schemas = Schemas()
        self.schemas.publish("items", *ITEM_COLUMNS)
        self._records = Records.__new__(Records)
        self._records.offsets = {}
        self.sink = self.new_sink()

    def new_sink(self) -> OpenSearchSink:
        context = SinkContext(PIPELINE, "search", [], self.schemas, get_logger(sink="search"))
        sink = OpenSearchSink(self.config, context)
        sink.open()
        return sink

    def reopen(self) -> None:
        self.sink.close()
        self.sink = self.new_sink()

    def apply(self, *events: ChangeEvent) -> None:
        self.sink.write(self._records.records(*events))
        self.sink.flush()

    def names(self, table: str = "items") -> dict[Any, tuple[Any, Any]]:
        return {k: (r["name"], r["qty"]) for k, r in _docs(self.config, "public", table).items()}


@pytest.fixture
def os_sink(opensearch_server: Any) -> Any:
    harness = Harness(opensearch_server)
    yield harness
    harness.sink.close()


def test_replay_and_reordering_change_nothing(os_sink: Harness) -> None:
    changes = [
        item(Op.CREATE, 1, 10, "a", 1),
        item(Op.UPDATE, 1, 11, "a2", 2),
        item(Op.CREATE, 2, 12, "b", 1),
        item(Op.DELETE, 2, 13),
        item(Op.CREATE, 3, 14, "c", 1),
    ]
    os_sink.apply(*changes)
    expected = os_sink.names()
    for change in reversed(changes):  # every change again, one a batch, newest first
        os_sink.apply(change)
    os_sink.apply(*reversed(changes))  # and all in one batch, reversed
    assert os_sink.names() == expected == {"1": ("a2", 2), "3": ("c", 1)}


def test_a_delete_is_remembered_against_an_older_upsert_replayed(os_sink: Harness) -> None:
    os_sink.apply(item(Op.CREATE, 1, 10, "a", 1))
    os_sink.apply(item(Op.DELETE, 1, 40))
    os_sink.reopen()  # remembered by the server (the delete's version), not the sink's memory
    os_sink.apply(item(Op.UPDATE, 1, 35, "zombie", 4))
    os_sink.apply(item(Op.CREATE, 1, 10, "a", 1))
    assert os_sink.names() == {}
    os_sink.apply(item(Op.CREATE, 1, 41, "back", 5))  # a newer insert of the key is applied
    assert os_sink.names() == {"1": ("back", 5)}


def test_composite_keys_get_a_stable_document_id(os_sink: Harness) -> None:
    os_sink.schemas.publish(
        "lines",
        Column("order_id", "bigint", key=True, nullable=False),
        Column("line", "text", key=True, nullable=False),
        Column("qty", "integer"),
    )

    def line(op: Op, order: int, name: str, pos: int, qty: int = 0) -> ChangeEvent:
        key = {"order_id": order, "line": name}
        row = None if op is Op.DELETE else {**key, "qty": qty}
        return event(op, key, row, pos, table="lines")

    os_sink.apply(line(Op.CREATE, 1, "a:b", 10, 1), line(Op.CREATE, 1, "a", 11, 2))
    os_sink.apply(line(Op.UPDATE, 1, "a:b", 12, 3), line(Op.DELETE, 1, "a", 13))
    os_sink.apply(line(Op.UPDATE, 1, "a:b", 11, 99))  # older: refused by its version
    docs = _docs(os_sink.config, "public", "lines")
    assert docs == {'[1,"a:b"]': {"order_id": 1, "line": "a:b", "qty": 3}}
    assert doc_id({"id": 7}) == "7" and doc_id({"id": "x y"}) == "x y"
    assert doc_id({"id": "z" * 600}).startswith("sha256:")


def test_an_any_type_key_keeps_the_number_and_the_string_of_one_text_apart(
    os_sink: Harness,
) -> None:
    # A MongoDB collection may hold the _id 5 and the _id "5": two documents. Its schema gives
    # _id no type, which the sink reads from the pipeline's schemas.
    os_sink.schemas.publish("docs", Column("_id", "", key=True), Column("v", ""))

    def doc(op: Op, doc_key: Any, pos: int, v: int = 0) -> ChangeEvent:
        key = {"_id": doc_key}
        return event(op, key, None if op is Op.DELETE else {**key, "v": v}, pos, table="docs")

    ids: list[Any] = [5, "5", "abc", True, "true"]
    os_sink.apply(*(doc(Op.CREATE, i, 10 + n, n) for n, i in enumerate(ids)))
    os_sink.apply(doc(Op.DELETE, "5", 30), doc(Op.DELETE, True, 31))
    docs = _docs(os_sink.config, "public", "docs")
    assert docs == {
        "5": {"_id": 5, "v": 0},
        "abc": {"_id": "abc", "v": 2},
        '"true"': {"_id": "true", "v": 4},
    }
    assert doc_id({"_id": "5"}, any_type=True) == '"5"' and doc_id({"_id": "5"}) == "5"


def test_truncate_empties_the_index_and_older_changes_stay_out(os_sink: Harness) -> None:
    os_sink.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    truncate = event(Op.TRUNCATE, {}, None, 20)
    os_sink.apply(item(Op.UPDATE, 1, 12, "a2", 2), truncate, item(Op.CREATE, 3, 21, "c", 3))
    assert os_sink.names() == {"3": ("c", 3)}
    os_sink.reopen()
    os_sink.apply(item(Op.UPDATE, 2, 15, "zombie", 9), truncate)  # a replay from before it
    assert os_sink.names() == {"3": ("c", 3)}


def test_added_column_extends_the_mapping_and_a_type_change_stops(os_sink: Harness) -> None:
    os_sink.apply(item(Op.CREATE, 1, 10, "a", 1))
    os_sink.schemas.publish("items", *ITEM_COLUMNS, Column("price", "numeric(10,2)"))
    os_sink.apply(item(Op.CREATE, 2, 11, "b", 2, price="12.50"))
    client = connect(os_sink.config)
    index = os_sink.config.index_name(PIPELINE, ("public", "items"))
    client.indices.refresh(index=index)
    found = client.search(index=index, body={"query": {"range": {"price": {"gte": 12}}}})
    assert [h["_id"] for h in found["hits"]["hits"]] == ["2"]
    changed = (ITEM_COLUMNS[0], Column("name", "bigint"), ITEM_COLUMNS[2])
    os_sink.schemas.publish("items", *changed)
    with pytest.raises(SinkFatal, match=r"--reset-table public\.items"):
        os_sink.apply(item(Op.CREATE, 3, 12, "c", 3))


def test_versions_keep_a_keys_order() -> None:
    assert version(0x16B3740, 3, "postgresql") == (0x16B3740 << 16 | 3, "external")
    assert version(10, 70_000, "postgresql") == (10 << 16 | 0xFFFF, "external_gte")
    assert version(10, 70_000, "postgresql")[0] < version(11, 0, "postgresql")[0]
    mongo = (1_700_000_000 << 32) | 5
    assert version(mongo, 0, "mongodb") == (mongo, "external")
    assert version(mongo, 2, "mongodb") == (mongo, "external_gte")
    with pytest.raises(SinkFatal, match="2\\*\\*47"):
        version(1 << 47, 0, "postgresql")


def test_cdc_search_queries_the_index(os_sink: Harness, tmp_path: Path) -> None:
    os_sink.apply(item(Op.CREATE, 1, 10, "red apple", 1), item(Op.CREATE, 2, 11, "green pear", 2))
    client = connect(os_sink.config)
    client.indices.refresh(index=os_sink.config.index_name(PIPELINE, ("public", "items")))
    pipeline = tmp_path / "shop.yaml"
    pipeline.write_text(
        f"version: 1\nname: {PIPELINE}\nsource:\n  type: postgres\n  dsn: postgresql://x/y\n"
        "  tables: [public.items]\nsinks:\n  - name: search\n    type: opensearch\n"
        f"    url: {os_sink.config.url}\n    index: '{os_sink.config.index}'\n"
        + auth_yaml(os_sink.config)
    )
    result = CliRunner().invoke(main, ["search", str(pipeline), "public.items", "apple"])
    assert result.exit_code == 0, result.output
    assert [orjson.loads(line)["id"] for line in result.output.splitlines()] == [1]


def test_mongodb_documents_keep_their_id_and_transactions_keep_order(os_sink: Harness) -> None:
    os_sink.schemas.publish("docs", Column("_id", "", key=True), Column("body", ""))
    base = (1_700_000_000 << 32) | 1  # a clusterTime: seconds << 32 | increment

    def doc(op: Op, key: str, body: Any, pos: int, seq: int = 0) -> ChangeEvent:
        source = SourceInfo("mongodb", "db", "public", "docs", 0, pos, seq)
        row = None if op is Op.DELETE else {"_id": key, "body": body}
        before = {"_id": key} if op is Op.DELETE else None
        return ChangeEvent(op, {"_id": key}, before, row, source)

    os_sink.apply(doc(Op.CREATE, "a", {"n": 1}, base), doc(Op.CREATE, "b", "x", base + 1))
    # One transaction (one clusterTime, sequences 0..2): two batches, the later change wins.
    os_sink.apply(doc(Op.UPDATE, "a", {"n": 2}, base + 5, 0))
    os_sink.apply(doc(Op.UPDATE, "a", {"n": 3}, base + 5, 2))
    os_sink.apply(doc(Op.UPDATE, "a", {"n": 0}, base + 4))  # older: refused
    os_sink.apply(doc(Op.DELETE, "b", None, base + 6))
    assert _docs(os_sink.config, "public", "docs") == {"a": {"_id": "a", "body": {"n": 3}}}


def test_a_mongodb_tombstone_alone_deletes_under_its_deletes_version(os_sink: Harness) -> None:
    # Compaction took the delete: its tombstone (no source block) is the delete, versioned as
    # the table's connector packs a position (MongoDB: the position alone).
    columns = (Column("_id", "", key=True), Column("body", ""))
    os_sink.schemas.tables["db", "docs"] = TableSchema("mongodb", "db", "docs", columns)
    base = (1_700_000_000 << 32) | 1

    def doc(op: Op, pos: int) -> ChangeEvent:
        source = SourceInfo("mongodb", "db", "db", "docs", 0, pos, 0)
        row = None if op is Op.DELETE else {"_id": "a", "body": pos}
        return ChangeEvent(op, {"_id": "a"}, {"_id": "a"} if row is None else None, row, source)

    os_sink.apply(doc(Op.CREATE, base))
    tombstone = os_sink._records.records(doc(Op.DELETE, base + 2))[-1]
    assert tombstone.value is None and tombstone.pos is not None
    os_sink.sink.write([tombstone])
    os_sink.sink.flush()
    assert _docs(os_sink.config, "db", "docs") == {}
    os_sink.apply(doc(Op.UPDATE, base + 1))  # older than the delete: stays out
    assert _docs(os_sink.config, "db", "docs") == {}
    os_sink.apply(doc(Op.CREATE, base + 3))  # newer: back
    assert _docs(os_sink.config, "db", "docs") == {"a": {"_id": "a", "body": base + 3}}
