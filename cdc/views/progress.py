"""Where a view is: how far behind its tables it is, what its last batch recorded, and how many
documents its local store holds. ``cdc status``, ``cdc verify`` and the view's lag metric read
it here, on their own connections, never the view task's.

The lag is the view's consumer group's committed offsets against the offset *after each input
partition's last record*, not its end offset: on Kafka transaction markers take offsets past the
last record, which the view's offsets (committed in its transactions) never reach.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from cdc.config.pipeline import Pipeline
from cdc.config.views import ViewConfig
from cdc.contracts.events import topic_name
from cdc.log.base import Log, TopicPartition
from cdc.log.offsets import end_offsets, last_offsets
from cdc.views import records as out

#: ``{"<topic>[<partition>]": {"committed": n, "end": m}}`` for each partition not read to its end.
Behind = dict[str, dict[str, int]]


def input_topics(pipeline: Pipeline, view: ViewConfig) -> list[str]:
    """The topics of the view's tables (root first), where the transforms route them."""
    chain = pipeline.chain()
    return [topic_name(pipeline.name, *chain.table(t).split(".", 1)) for t in view.inputs()]


def behind(log: Log, group: str, topics: Sequence[str]) -> Behind:
    """The partitions of ``topics`` that ``group`` has not read up to their last record."""
    committed = log.committed_offsets(group)
    left: Behind = {}
    for topic in topics:
        ends = end_offsets(log, topic)  # none for a topic not created yet
        if all(committed.get(TopicPartition(topic, p), 0) >= end for p, end in ends.items()):
            continue  # read to its end: its last record need not be looked for
        for partition, end in last_offsets(log, topic).items():
            done = committed.get(TopicPartition(topic, partition), 0)
            if done < end:
                left[f"{topic}[{partition}]"] = {"committed": done, "end": end}
    return left


def view_behind(log: Log, pipeline: Pipeline, view: ViewConfig) -> Behind:
    """What ``view`` has yet to read of its tables (empty: it read them to their ends)."""
    return behind(log, out.view_group(pipeline.name, view), input_topics(pipeline, view))


def records_behind(left: Behind) -> int:
    """The records of :func:`behind`'s partitions not yet read, in all."""
    return sum(part["end"] - part["committed"] for part in left.values())


def last_counters(log: Log, topic: str) -> dict[str, Any] | None:
    """The view's counters as its last batch wrote them (``high``, ``seq``, ``token``): its
    counters record is the last record of its state topic's partition, as each batch appends
    it last; ``None`` when there is none."""
    for partition, end in log.end_offsets(topic).items():
        start, span, last = end, 1, None
        while start > 0 and last is None:
            # On Kafka, transaction markers take the offsets after the last record.
            start = max(0, start - span)
            records = log.read(topic, partition, start, end - start)
            last = records[-1] if records else None
            span *= 8
        if last is not None and last.key == out.META_KEY and last.value is not None:
            found = orjson.loads(last.value)
            return found if isinstance(found, dict) else None
    return None


def last_token(log: Log, topic: str) -> str | None:
    """The commit token of the last batch in the state topic; ``None`` when there is none."""
    token = (last_counters(log, topic) or {}).get("token")
    return token if isinstance(token, str) else None


def stored_documents(path: Path) -> int | None:
    """The documents of the view's local store at ``path`` (its root rows), read without
    writing to it; ``None`` when there is no store here (another machine runs the view)."""
    if not path.exists():
        return None
    # Read-only: the running view holds it open for writing (WAL mode lets both go on).
    uri = f"{path.resolve().as_uri()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        try:
            # The root is the view's first table (ViewConfig.inputs): index 0 in the store.
            (count,) = conn.execute("SELECT count(*) FROM rows WHERE t = 0").fetchone()
        except sqlite3.Error:  # created but not yet initialised, or being rebuilt
            return None
    return int(count)
