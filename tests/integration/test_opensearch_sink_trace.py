"""``read_key`` (``cdc trace``) of the OpenSearch sink on a real node: a key's document and the
position its external version packs; a deleted key leaves no document to read."""

from __future__ import annotations

import uuid
from typing import Any

from cdc.contracts.events import Op
from sinks.opensearch.config import OpenSearchSinkConfig
from sinks.opensearch.plugin import OpenSearchSinkPlugin
from sinks.opensearch.sink import OpenSearchSink
from tests.integration.keyed_records import ORDERS, PIPELINE, Records, apply, context, event
from tests.integration.read_key_kit import check, scenario
from tests.services.opensearch import sink_options


def test_read_key(opensearch_server: Any) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    config = OpenSearchSinkConfig(
        name="search",
        index=prefix + "-{pipeline}.{schema}.{table}",
        offsets_index=f"{prefix}-offsets",
        replicas=0,
        **sink_options(opensearch_server),
    )
    sink = OpenSearchSink(config, context(sink="search"))
    sink.open()
    try:
        apply(sink, Records()(*scenario(), event(Op.CREATE, {"_id": "m1"}, 50, ORDERS, n=1)))
    finally:
        sink.close()
    check(OpenSearchSinkPlugin, config, PIPELINE, remembers_deletes=False)
    # A MongoDB document's version is its position alone: no (position, sequence) to give.
    found = OpenSearchSinkPlugin.read_key(config, *ORDERS, {"_id": "m1"}, pipeline=PIPELINE)
    assert found is not None and found[1] is None and found[0]["n"] == 1, found
