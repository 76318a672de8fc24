"""The consumed offsets, in the dedicated offsets index: one document per pipeline, sink and
partition (``<pipeline>|<sink>|<topic>|<partition>``), holding the next offset to read.

They are written only after the Bulk API acknowledged the batch's documents, so a stored offset
never runs ahead of the data; a crash between the two replays the batch, which the external
versions make harmless. A write is durable when acknowledged (the translog); a read refreshes
this small index first and searches it, so a worker that takes a partition over (Kafka) reads
what the previous one stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import orjson
from opensearchpy import OpenSearch
from opensearchpy import exceptions as os_errors

from cdc.log.base import TopicPartition

_BODY = {
    "settings": {"number_of_shards": 1, "auto_expand_replicas": "0-1"},
    "mappings": {
        "dynamic": False,
        "properties": {
            "pipeline": {"type": "keyword"},
            "sink": {"type": "keyword"},
            "topic": {"type": "keyword"},
            "partition": {"type": "integer"},
            "next_offset": {"type": "long"},
        },
    },
}


def ensure(client: OpenSearch, index: str) -> None:
    """Create the offsets index unless it exists (a concurrent creation is fine)."""
    if client.indices.exists(index=index):
        return
    try:
        client.indices.create(index=index, body=_BODY)
    except os_errors.RequestError as exc:
        if "resource_already_exists" not in str(exc.error):
            raise


def load(client: OpenSearch, index: str, pipeline: str, sink: str) -> dict[TopicPartition, int]:
    client.indices.refresh(index=index)
    query = {"bool": {"filter": [{"term": {"pipeline": pipeline}}, {"term": {"sink": sink}}]}}
    reply = client.search(index=index, body={"query": query, "size": 10_000})
    out = {}
    for hit in reply["hits"]["hits"]:
        doc = hit["_source"]
        out[TopicPartition(doc["topic"], int(doc["partition"]))] = int(doc["next_offset"])
    return out


def store(
    client: OpenSearch,
    index: str,
    pipeline: str,
    sink: str,
    offsets: Mapping[TopicPartition, int],
) -> None:
    """Write the next offset of each partition; refused items raise (nothing is assumed)."""
    if not offsets:
        return
    lines = []
    for tp, offset in offsets.items():
        doc_id = f"{pipeline}|{sink}|{tp.topic}|{tp.partition}"
        lines.append(orjson.dumps({"index": {"_index": index, "_id": doc_id}}))
        doc = {"pipeline": pipeline, "sink": sink, "topic": tp.topic, "partition": tp.partition}
        lines.append(orjson.dumps({**doc, "next_offset": offset}))
    reply = client.bulk(body=b"\n".join(lines) + b"\n")
    if reply.get("errors"):
        raise os_errors.TransportError(500, "offsets not stored", reply)


def forget_topics(
    client: OpenSearch, index: str, pipeline: str, sink: str, topics: Iterable[str]
) -> None:
    """Delete the sink's offsets of ``topics`` (by id: ``_delete_by_query`` is a module a
    cluster may lack); an offset already gone (404) is forgotten, any other refused item
    raises (a kept offset would resume the reset table past its start)."""
    wanted = set(topics)
    stale = [tp for tp in load(client, index, pipeline, sink) if tp.topic in wanted]
    if not stale:
        return
    lines = [
        orjson.dumps({"delete": {"_index": index, "_id": f"{pipeline}|{sink}|{t}|{p}"}})
        for t, p in stale
    ]
    reply = client.bulk(body=b"\n".join(lines) + b"\n")
    if reply.get("errors"):
        failed = [i for i in reply["items"] if i["delete"].get("status", 500) not in (200, 404)]
        if failed:
            raise os_errors.TransportError(500, "offsets not forgotten", reply)
