"""``cdc tail``: follow one topic across its partitions without joining a consumer group."""

from __future__ import annotations

import time
from collections.abc import Iterator

import orjson

from cdc.log.base import Log, StoredRecord

IDLE_SLEEP_S = 0.05


def follow(
    log: Log,
    topic: str,
    from_beginning: bool,
    max_records: int | None,
    timeout_s: float | None,
) -> Iterator[str]:
    """Yield ``{"topic", "partition", "offset", "key", "value"}`` JSON lines, and ``"pos"``
    (the record's source position, kept beside Debezium's value) when the record has one.

    Stops after ``max_records`` records, or once nothing new arrived for ``timeout_s`` seconds
    (``None``: follow until interrupted).
    """
    ends = log.end_offsets(topic)
    positions = {p: 0 for p in ends} if from_beginning else dict(ends)
    printed = 0
    last_new = time.monotonic()
    while max_records is None or printed < max_records:
        got_any = False
        for partition, offset in positions.items():
            records = log.read(topic, partition, offset, 1000)
            for record in records:
                yield _line(record)
                printed += 1
                positions[partition] = record.offset + 1
                if max_records is not None and printed >= max_records:
                    return
            got_any = got_any or bool(records)
        if got_any:
            last_new = time.monotonic()
            continue
        if timeout_s is not None and time.monotonic() - last_new >= timeout_s:
            return
        time.sleep(IDLE_SLEEP_S)


def _line(record: StoredRecord) -> str:
    line = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": None if record.key is None else orjson.loads(record.key),
        "value": None if record.value is None else orjson.loads(record.value),
    }
    if record.pos is not None:
        line["pos"] = orjson.loads(record.pos)
    return orjson.dumps(line).decode()
