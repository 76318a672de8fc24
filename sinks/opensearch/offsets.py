"""The consumed offsets, in the dedicated offsets index: one document per pipeline, sink and
partition (``<pipeline>|<sink>|<topic>|<partition>``), holding the next offset to read.

They are written only after the Bulk API acknowledged the batch's documents, so a stored offset
never runs ahead of the data; a crash between the two replays the batch, which the external
versions make harmless. A write is durable when acknowledged (the translog); a read refreshes
this small index first and searches it, so a worker that takes a partition over (Kafka) reads
what the previous one stored.

Beside them, one more document (``<pipeline>|<sink>|consistent_position``, no ``topic``) holds
the source position the sink's data is consistent up to
(:class:`cdc.contracts.sink.PositionedSink`), written last in the offsets' bulk request: after
the batch's documents were acknowledged, so it never claims what the data does not hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import orjson
from opensearchpy import OpenSearch
from opensearchpy import exceptions as os_errors

from cdc.log.base import TopicPartition
from sinks.offsets import POSITION_FIELD

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
        if "topic" in doc:  # not the position's document
            out[TopicPartition(doc["topic"], int(doc["partition"]))] = int(doc["next_offset"])
    return out


def _position_id(pipeline: str, sink: str) -> str:
    return f"{pipeline}|{sink}|{POSITION_FIELD}"


def read_position(client: OpenSearch, index: str, pipeline: str, sink: str) -> str | None:
    """The consistent source position stored beside the offsets; ``None`` when none is."""
    try:
        reply = client.get(index=index, id=_position_id(pipeline, sink))
    except os_errors.NotFoundError:
        return None
    found = reply.get("_source", {}).get("position")
    return found if isinstance(found, str) else None


def forget_position(client: OpenSearch, index: str, pipeline: str, sink: str) -> None:
    """Delete the stored position (a table read again from its start no longer holds it)."""
    try:
        client.delete(index=index, id=_position_id(pipeline, sink))
    except os_errors.NotFoundError:
        return


def store(
    client: OpenSearch,
    index: str,
    pipeline: str,
    sink: str,
    offsets: Mapping[TopicPartition, int],
    position: str | None = None,
) -> None:
    """Write the next offset of each partition, then ``position`` (if given) beside them;
    refused items raise (nothing is assumed)."""
    if not offsets and position is None:
        return
    lines = []
    for tp, offset in offsets.items():
        doc_id = f"{pipeline}|{sink}|{tp.topic}|{tp.partition}"
        lines.append(orjson.dumps({"index": {"_index": index, "_id": doc_id}}))
        doc = {"pipeline": pipeline, "sink": sink, "topic": tp.topic, "partition": tp.partition}
        lines.append(orjson.dumps({**doc, "next_offset": offset}))
    if position is not None:
        doc_id = _position_id(pipeline, sink)
        lines.append(orjson.dumps({"index": {"_index": index, "_id": doc_id}}))
        lines.append(orjson.dumps({"pipeline": pipeline, "sink": sink, "position": position}))
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
