"""``cdc doctor`` for the OpenSearch sink: the cluster answers, runs OpenSearch 2 or newer, and
lets the sink create an index (a probe index, deleted again)."""

from __future__ import annotations

import uuid
from typing import Any, Final

from opensearchpy import OpenSearch

from cdc.contracts.checks import Check, failed, passed
from sinks.opensearch.client import connect, translate
from sinks.opensearch.config import OpenSearchSinkConfig

MIN_MAJOR: Final = 2


def doctor(config: OpenSearchSinkConfig, pipeline_name: str) -> list[Check]:
    """``reachable``, ``version`` and ``permitted``, each ok or with its fix."""
    client = connect(config)
    try:
        try:
            info = client.info()
        except Exception as exc:
            fix = f"start the cluster at {config.url}, or correct url, credentials and TLS options"
            return [failed("reachable", str(translate(exc, config, "answering")), fix)]
        reached = passed("reachable", f"{config.url} answers the sink's requests")
        return [reached, _version(info), _permitted(client, config)]
    finally:
        client.close()


def _version(info: dict[str, Any]) -> Check:
    version = info.get("version", {})
    number = str(version.get("number", "?"))
    distribution = str(version.get("distribution", "elasticsearch"))
    major = int(number.split(".")[0]) if number.split(".")[0].isdigit() else 0
    if distribution != "opensearch" or major < MIN_MAJOR:
        fix = "use OpenSearch 2.0 or newer as the target"
        return failed("version", f"{distribution} {number} is not OpenSearch 2+", fix)
    return passed("version", f"OpenSearch {number}")


def _permitted(client: OpenSearch, config: OpenSearchSinkConfig) -> Check:
    probe = f"cdc-doctor-probe-{uuid.uuid4().hex[:12]}"
    try:
        client.indices.create(index=probe, body={"settings": {"number_of_replicas": 0}})
        client.indices.delete(index=probe)
    except Exception as exc:
        fix = "grant the sink's user create_index, write and delete on its indexes"
        return failed("permitted", str(translate(exc, config, "creating an index")), fix)
    return passed("permitted", "the sink may create and delete indexes")
