"""The consistent source position the OpenSearch sink stores beside its offsets, on a real node:
the same checks as the other sinks' (:mod:`tests.integration.test_sink_stored_position`), run
against this sink (in make test's second lane, with the OpenSearch node)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cdc.contracts.events import Op, topic_name
from sinks.opensearch.config import OpenSearchSinkConfig
from sinks.opensearch.plugin import OpenSearchSinkPlugin
from sinks.opensearch.sink import OpenSearchSink
from tests.integration import keyed_records
from tests.integration.test_sink_stored_position import (
    Store,
    test_a_table_reset_forgets_the_stored_position,
    test_the_position_is_stored_with_the_offsets_and_read_back,
)
from tests.services.opensearch import sink_options

__all__ = [
    "test_a_table_reset_forgets_the_stored_position",
    "test_the_position_is_stored_with_the_offsets_and_read_back",
]


@pytest.fixture
def store(opensearch_server: Any) -> Iterator[Store]:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    config = OpenSearchSinkConfig(
        name="search",
        index=prefix + "-{pipeline}.{schema}.{table}",
        offsets_index=f"{prefix}-offsets",
        replicas=0,
        **sink_options(opensearch_server),
    )
    sink = OpenSearchSink(config, keyed_records.context(sink="search"))
    sink.open()
    records = keyed_records.Records()
    yield Store(
        sink,
        lambda key, pos: records(keyed_records.item(Op.CREATE, key, pos, name="n")),
        lambda: OpenSearchSinkPlugin.read_consistent_position(
            config, pipeline=keyed_records.PIPELINE
        ),
        topic_name(keyed_records.PIPELINE, *keyed_records.ITEMS),
    )
    sink.close()
