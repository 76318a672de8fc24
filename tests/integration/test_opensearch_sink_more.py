"""The OpenSearch sink, more: renames and widenings, ``cdc doctor``, secrets kept out of errors,
and a bad document dead-lettered alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opensearchpy import exceptions as os_errors

from cdc.cli.main import main
from cdc.contracts.errors import RecordError, SinkFatal, SinkUnavailable
from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from cdc.contracts.sink import SinkContext
from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE
from cdc.support.logging import get_logger
from sinks.opensearch import offsets
from sinks.opensearch.client import connect
from sinks.opensearch.config import OpenSearchSinkConfig
from sinks.opensearch.mappings import field
from sinks.opensearch.plugin import OpenSearchSinkPlugin
from sinks.opensearch.sink import OpenSearchSink
from tests.integration.duckdb_kit import PIPELINE, Schemas, item
from tests.integration.test_opensearch_sink import Harness, _config, _docs
from tests.services.opensearch import ExternalOpenSearch, sink_options
from tests.services.ports import free_port

SECRET = "s3cr3t-Pa55word"


@pytest.fixture
def os_sink(opensearch_server: Any) -> Any:
    harness = Harness(opensearch_server)
    yield harness
    harness.sink.close()


def _columns(name: str, qty: str) -> tuple[Column, ...]:
    return (
        Column("id", "bigint", key=True, nullable=False, id=1),
        Column(name, "text", id=2),
        Column("qty", qty, id=3),
    )


def test_a_widening_is_applied_and_a_rename_stops_with_the_reset_command(os_sink: Harness) -> None:
    os_sink.schemas.publish("items", *_columns("name", "integer"))
    os_sink.apply(item(Op.CREATE, 1, 10, "a", 1))
    os_sink.schemas.publish("items", *_columns("name", "bigint"))  # both map to long
    os_sink.apply(item(Op.CREATE, 2, 11, "b", 2**40))
    assert os_sink.names() == {"1": ("a", 1), "2": ("b", 2**40)}
    os_sink.reopen()  # the column ids are recorded in the index, not in the sink's memory
    os_sink.schemas.publish("items", *_columns("title", "bigint"))
    with pytest.raises(SinkFatal, match=r"renamed name -> title.*--reset-table public\.items"):
        os_sink.apply(item(Op.CREATE, 3, 12, "c", 3))


def test_a_document_the_mapping_refuses_is_a_record_error_naming_it(os_sink: Harness) -> None:
    refused = {"not": "v4lue-of-a-row"}  # an object for a text field: the mapping refuses it
    records = os_sink._records.records(
        item(Op.CREATE, 1, 10, "a", 1),
        item(Op.CREATE, 2, 11, refused, 2),  # type: ignore[arg-type]
    )
    os_sink.sink.write(records)
    with pytest.raises(RecordError) as caught:
        os_sink.sink.flush()
    assert caught.value.record is records[1]
    # The error's type and the field, never the value OpenSearch's reason quotes.
    assert "mapper_parsing_exception" in str(caught.value) and "field name" in str(caught.value)
    assert "v4lue-of-a-row" not in str(caught.value)
    os_sink.sink.write([records[0]])  # the runner sends the batch again without it
    os_sink.sink.flush()
    assert os_sink.names() == {"1": ("a", 1)}


def test_doctor_passes_on_the_node_and_names_the_fix_when_unreachable(
    opensearch_server: Any,
) -> None:
    checks = OpenSearchSinkPlugin.doctor(_config(**sink_options(opensearch_server)), PIPELINE)
    assert [(c.name, c.ok) for c in checks] == [
        ("reachable", True),
        ("version", True),
        ("permitted", True),
    ], checks
    assert "OpenSearch 2." in checks[1].detail
    down = _config(f"http://127.0.0.1:{free_port()}", username="cdc", password=SECRET)
    (failed,) = OpenSearchSinkPlugin.doctor(down, PIPELINE)
    assert failed.name == "reachable" and not failed.ok and failed.fix
    assert SECRET not in f"{failed.detail} {failed.fix}"


def test_secrets_never_reach_errors_or_the_config_repr(opensearch_server: Any) -> None:
    config = _config(f"http://127.0.0.1:{free_port()}", api_key=SECRET)
    assert SECRET not in repr(config) and SECRET not in str(config.model_dump())
    context = SinkContext(PIPELINE, "search", [], Schemas(), get_logger(sink="search"))
    sink = OpenSearchSink(config, context)
    with pytest.raises(SinkUnavailable) as caught:
        sink.open()
    assert SECRET not in str(caught.value) and "127.0.0.1" in str(caught.value)


def test_credentials_in_the_url_are_a_config_error_that_does_not_quote_them(
    tmp_path: Path,
) -> None:
    pipeline = tmp_path / "shop.yaml"
    pipeline.write_text(
        "version: 1\nname: shop\nsource:\n  type: postgres\n  dsn: postgresql://x/y\n"
        "  tables: [public.items]\nsinks:\n  - name: search\n    type: opensearch\n"
        f"    url: http://cdc:{SECRET}@localhost:9200\n"
    )
    result = CliRunner().invoke(main, ["validate", str(pipeline)])
    assert result.exit_code == 2, result.output
    assert "not in the url" in result.output and SECRET not in result.output


def test_a_test_cluster_url_with_userinfo_gives_the_sink_its_credentials() -> None:
    # CDC_TEST_OPENSEARCH_URL may hold a user (a secured cluster); the sink refuses one in its
    # url, so the service hands it over as username and password.
    server = ExternalOpenSearch(f"https://ad%40min:{SECRET}%3A@search.test:9200/")
    config = OpenSearchSinkConfig(name="search", **sink_options(server))
    assert config.url == "https://search.test:9200" and config.username == "ad@min"
    assert config.password is not None and config.password.get_secret_value() == SECRET + ":"
    plain = OpenSearchSinkConfig(name="search", **sink_options(ExternalOpenSearch("http://h:1")))
    assert (plain.url, plain.username, plain.password) == ("http://h:1", None, None)


def test_read_rows_of_a_table_never_written_is_empty(opensearch_server: Any) -> None:
    assert _docs(_config(**sink_options(opensearch_server)), "public", "nothing") == {}


def test_created_indexes_remember_deletes_for_gc_deletes(os_sink: Harness) -> None:
    os_sink.apply(item(Op.CREATE, 1, 10, "a", 1))
    index = os_sink.config.index_name(PIPELINE, ("public", "items"))
    client = connect(os_sink.config)
    settings = client.indices.get_settings(index=index)[index]["settings"]["index"]
    assert settings["gc_deletes"] == "24h"
    mapping = client.indices.get_mapping(index=index)[index]["mappings"]
    assert mapping["dynamic"] == "false"
    assert mapping["properties"]["name"]["type"] == "text"
    assert mapping["properties"]["qty"]["type"] == "long"


@pytest.mark.parametrize(
    ("type_name", "options", "expected"),
    [
        ("bigint", READABLE, "long"),
        ("integer[]", READABLE, "long"),
        ("double precision", READABLE, "double"),
        ("numeric(12,2)", READABLE, "double"),
        ("numeric(12,2)", DEBEZIUM_DEFAULTS, "object"),  # base64: stored only
        ("boolean", READABLE, "boolean"),
        ("timestamp(3) with time zone", READABLE, "date"),
        ("date", DEBEZIUM_DEFAULTS, "long"),  # epoch days
        ("character varying(20)", READABLE, "text"),
        ("uuid", READABLE, "keyword"),
        ("time with time zone", READABLE, "keyword"),
        ("jsonb", READABLE, "object"),
        ("", READABLE, "object"),  # a MongoDB field: any JSON
    ],
)
def test_mapping_by_source_type(type_name: str, options: Any, expected: str) -> None:
    assert field(type_name, options)["type"] == expected


def test_offsets_not_forgotten_are_an_error(os_sink: Harness) -> None:
    # reset_table forgets a topic's offsets before storing 0: a delete the cluster refused
    # (here a write block) must not pass for done.
    os_sink.apply(item(Op.CREATE, 1, 10, "a", 1))
    client, index = connect(os_sink.config), os_sink.config.offsets_index
    stored = offsets.load(client, index, PIPELINE, "search")
    assert stored
    client.indices.put_settings(index=index, body={"index.blocks.write": True})
    try:
        with pytest.raises(os_errors.TransportError, match="offsets not forgotten"):
            offsets.forget_topics(client, index, PIPELINE, "search", {t.topic for t in stored})
    finally:
        client.indices.put_settings(index=index, body={"index.blocks.write": False})
    assert offsets.load(client, index, PIPELINE, "search") == stored
    offsets.forget_topics(client, index, PIPELINE, "search", {t.topic for t in stored})
    assert offsets.load(client, index, PIPELINE, "search") == {}
