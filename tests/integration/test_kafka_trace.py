"""``cdc trace``'s log side on a real Kafka broker: a key's versions are found by scanning its
one partition (Kafka has no key lookup), in offset order with their positions, and its dead
letters on any partition of the dead-letter topic; a table without a topic yet has none."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import orjson

from cdc.cli.trace_log import dead_letters, key_versions
from cdc.contracts.events import topic_name
from cdc.envelope.encode import encode_key, write_pos
from cdc.log.base import Record
from cdc.log.kafka import KafkaLog
from cdc.runtime.source_task import dead_letter_record
from tests.integration.test_kafka_log import kafka_config


def test_a_key_s_versions_and_dead_letters(kafka_server: Any) -> None:
    name = f"tr_{uuid.uuid4().hex[:8]}"
    topic = topic_name(name, "public", "t")
    log = KafkaLog(name, kafka_config(kafka_server.bootstrap_servers, partitions=3))
    try:
        records = [
            Record(topic, encode_key({"id": k}), _value(k, r), write_pos(100 * r + k, 0))
            for r in range(3)
            for k in range(12)
        ]
        letter = dead_letter_record(name, "sink:cache", topic, {"id": 7}, "refused", {"offset": 4})
        tx = log.begin()
        tx.append([*records, letter])
        tx.commit()
        pipeline = SimpleNamespace(name=name, envelope=SimpleNamespace(schemas_enable=False))
        versions, partitions, how = key_versions(log, pipeline, "public.t", {"id": 7})
        letters = dead_letters(log, name, "public.t", {"id": 7})
        missing = key_versions(log, pipeline, "public.other", {"id": 7})
        home = log.partition_for(topic, b'{"id":7}')
    finally:
        log.close()
    assert (partitions, how) == ([home], "partition scan")
    assert [(v.row, v.position) for v in versions] == [
        ({"id": 7, "v": r}, (100 * r + 7, 0)) for r in range(3)
    ]
    assert [v.offset for v in versions] == sorted(v.offset for v in versions)
    assert [(d["origin"], d["offset"], d["reason"]) for d in letters] == [
        ("sink:cache", 4, "refused")
    ]
    assert missing == ([], [], "no topic yet")


def _value(key: int, round_: int) -> bytes:
    return orjson.dumps({"op": "u", "after": {"id": key, "v": round_}, "source": {"ts_ms": 1}})
