"""The envelope encoding a log was written with, stored in the log itself.

A topic's records are read by sinks and by consumers outside the pipeline; one written under
``decimal.handling.mode: string`` and then appended to under ``precise`` would hold two
encodings that nothing tells apart. So the encoding (:meth:`EnvelopeOptions.encoding`) is
stored in the pipeline's schema topic (``<pipeline>.__schemas``) under a key of its own kind,
``{"kind": "encoding"}``, beside the tables' schemas (keyed ``{"schema", "table"}``); compaction
keeps its newest version. It works the same on the embedded and the Kafka log.

``cdc run`` writes it when the log has none. A log with table records but no stored encoding
was written before the ``envelope:`` block existed: its encoding is ``legacy``. When the stored
encoding differs from the pipeline file's, the run is refused (a config error), unless asked
with ``--accept-envelope-change``: then the new encoding is stored with the end offsets of the
table topics where it starts, and the ones before it are kept in the same record.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from cdc.contracts.errors import ConfigError
from cdc.contracts.schema import schema_topic
from cdc.envelope.options import EnvelopeOptions
from cdc.log.base import Log, Record, TopicInfo

if TYPE_CHECKING:  # annotations only
    from cdc.support.logging import Logger

ENCODING_KEY: Final = orjson.dumps({"kind": "encoding"})
_LOOK_AGAIN_S: Final = 5.0
_FOLLOW_FACTOR: Final = 20.0
_FOLLOW_MAX_S: Final = 1.0
LEGACY: Final = "legacy"
DEBEZIUM: Final = "debezium"


@dataclass(frozen=True)
class StoredEncoding:
    """How a log's records are encoded.

    Attributes:
        name: ``debezium`` (records as Debezium writes them under ``options``) or ``legacy``
            (written before the ``envelope:`` block: the pre-Debezium-exact encoding).
        options: :meth:`EnvelopeOptions.encoding` under Debezium's names (``{}`` for legacy).
        since: ``{topic: {partition: offset}}``, the first offset of each table topic written
            under this encoding (empty: from the start of every topic).
        previous: the encodings before this one, oldest first, each as :meth:`to_json`.
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    since: dict[str, dict[str, int]] = field(default_factory=dict)
    previous: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, options: EnvelopeOptions) -> StoredEncoding:
        return cls(DEBEZIUM, options.encoding())

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "encoding",
            "name": self.name,
            "options": self.options,
            "since": self.since,
            "previous": list(self.previous),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoredEncoding:
        return cls(
            str(data["name"]),
            dict(data.get("options") or {}),
            {t: dict(p) for t, p in (data.get("since") or {}).items()},
            tuple(data.get("previous") or ()),
        )

    def envelope(self) -> EnvelopeOptions | None:
        """The options records are decoded with (``None``: the legacy encoding)."""
        if self.name == LEGACY:
            return None
        return EnvelopeOptions.model_validate(self.options)

    def differences(self, options: EnvelopeOptions) -> list[tuple[str, Any, Any]]:
        """``(option, stored, wanted)`` for each encoding option ``options`` changes."""
        wanted = options.encoding()
        if self.name == LEGACY:
            return [(name, LEGACY, value) for name, value in wanted.items()]
        return [
            (name, self.options.get(name), value)
            for name, value in wanted.items()
            if self.options.get(name) != value
        ]


def is_encoding_key(key: bytes | dict[str, Any] | None) -> bool:
    """Whether a schema-topic key (raw or parsed) is the stored encoding's, not a table's."""
    if isinstance(key, bytes | bytearray):
        return bytes(key) == ENCODING_KEY
    return isinstance(key, dict) and key.get("kind") == "encoding"


def encoding_record(pipeline: str, stored: StoredEncoding) -> Record:
    return Record(schema_topic(pipeline), ENCODING_KEY, orjson.dumps(stored.to_json()))


def read_encoding(log: Log, pipeline: str) -> StoredEncoding | None:
    """The log's stored encoding: the newest one written, ``legacy`` for a log with table
    records and none stored, ``None`` for a log without either."""
    infos = {info.name: info for info in log.topics()}
    stored = _stored(log, infos, pipeline)
    if stored is not None:
        return stored
    if _table_ends(infos.values(), pipeline):
        return StoredEncoding(LEGACY)
    return None


def read_stored(log: Log, pipeline: str) -> StoredEncoding | None:
    """The newest encoding record of the log, ``None`` where none was ever written (unlike
    :func:`read_encoding`, a log with table records and none stored is not called legacy)."""
    return _stored(log, {info.name: info for info in log.topics()}, pipeline)


def _stored(log: Log, infos: dict[str, TopicInfo], pipeline: str) -> StoredEncoding | None:
    topic = schema_topic(pipeline)
    newest = _newest_encoding(log, infos[topic]) if topic in infos else None
    return None if newest is None else StoredEncoding.from_json(orjson.loads(newest))


def _newest_encoding(log: Log, info: TopicInfo) -> bytes | None:
    # Read, not looked up: the Kafka log looks keys up only for its source (latest_value).
    # The schema topic is small, and one key's versions are in one partition, in order.
    newest = None
    for partition, end in info.end_offsets.items():
        found, _ = _read_encodings(
            log, info.name, partition, info.start_offsets.get(partition, 0), end
        )
        newest = found or newest
    return newest


def _read_encodings(
    log: Log, topic: str, partition: int, offset: int, end: int
) -> tuple[bytes | None, int]:
    """The newest encoding record in ``[offset, end)`` of one partition, and where it stopped."""
    newest = None
    while offset < end:
        records = log.read(topic, partition, offset, 1000)
        if not records:
            break
        for record in records:
            if record.value is not None and is_encoding_key(record.key):
                newest = record.value
        offset = records[-1].offset + 1
    return newest, offset


class EncodingFollower:
    """The log's newest stored encoding, followed as the schema topic grows.

    A sink that runs in its own process (``cdc run --role sinks``) outlives a source restarted
    with an accepted change. The change is stored before the source writes anything under it,
    so a reader that calls :meth:`refresh` after each poll knows every record's encoding; when
    nothing is new, a refresh costs one end-offsets read. On Kafka, where that read is dear,
    it is made at most once a second (see :meth:`refresh`): a source restarted in another
    process takes longer than that between storing the change and writing under it.
    """

    def __init__(self, log: Log, pipeline: str, paced: bool = True) -> None:
        """``paced=False``: every :meth:`refresh` looks, whatever it costs."""
        self._log = log
        self._paced = paced
        self._topic = schema_topic(pipeline)
        self._next: dict[int, int] | None = None
        self._looked = -_LOOK_AGAIN_S
        self._due = 0.0
        self.newest: StoredEncoding | None = None

    def refresh(self) -> bool:
        """Read what the schema topic gained; True when a newer encoding was stored.

        At most ~5% of the caller's time goes here: where a look is dear (tens of ms for
        Kafka's list-offsets), it is made at most every ``20 x`` its cost, capped at a second;
        the embedded log's, well under a millisecond, is made at every call.
        """
        now = time.monotonic()
        if now < self._due:
            return False
        try:
            return self._refresh()
        finally:
            done = time.monotonic()
            if self._paced:
                self._due = done + min(_FOLLOW_MAX_S, (done - now) * _FOLLOW_FACTOR)

    def _refresh(self) -> bool:
        if self._next is None:
            return self._first()
        found = None
        for partition, end in self._log.end_offsets(self._topic).items():
            start = self._next.get(partition, 0)
            newest, self._next[partition] = _read_encodings(
                self._log, self._topic, partition, start, end
            )
            found = newest or found
        if found is None:
            return False
        self.newest = StoredEncoding.from_json(orjson.loads(found))
        return True

    def _first(self) -> bool:
        # Listing topics is dear on Kafka: a log without a schema topic is looked at again
        # only every few seconds (`cdc run` stores the encoding before any sink starts).
        if self._paced and time.monotonic() - self._looked < _LOOK_AGAIN_S:
            return False
        self._looked = time.monotonic()
        info = next((i for i in self._log.topics() if i.name == self._topic), None)
        if info is None:
            return False
        self._next = {}
        found = None
        for partition, end in info.end_offsets.items():
            start = info.start_offsets.get(partition, 0)
            newest, self._next[partition] = _read_encodings(
                self._log, self._topic, partition, start, end
            )
            found = newest or found
        if found is not None:
            self.newest = StoredEncoding.from_json(orjson.loads(found))
        return found is not None


def table_end_offsets(log: Log, pipeline: str) -> dict[str, dict[str, int]]:
    """``{topic: {partition: end offset}}`` of the pipeline's table topics holding records."""
    return _table_ends(log.topics(), pipeline)


def _table_ends(infos: Iterable[TopicInfo], pipeline: str) -> dict[str, dict[str, int]]:
    prefix = f"{pipeline}."
    ends: dict[str, dict[str, int]] = {}
    for info in infos:
        rest = info.name.removeprefix(prefix)
        if rest == info.name or rest.startswith("__") or rest == "transaction":
            continue
        if any(info.end_offsets.values()):
            ends[info.name] = {str(p): int(o) for p, o in sorted(info.end_offsets.items())}
    return ends


class EnvelopeChanged(ConfigError):
    """The pipeline file's ``envelope:`` block encodes records unlike the log holds them."""


def ensure_encoding(
    log: Log, pipeline: str, options: EnvelopeOptions, accept_change: bool, logger: Logger
) -> StoredEncoding:
    """Check (and, where the log has none, store) the log's encoding before a run.

    Raises:
        EnvelopeChanged: the stored encoding differs from ``options`` and ``accept_change``
            is not set.
    """
    stored = read_encoding(log, pipeline)
    if stored is not None and stored.name == DEBEZIUM and not stored.differences(options):
        return stored
    if stored is None:
        return _write(log, pipeline, StoredEncoding.of(options))
    changes = stored.differences(options)
    if not accept_change:
        raise EnvelopeChanged(_problems(stored, changes))
    since = table_end_offsets(log, pipeline)
    new = StoredEncoding(
        DEBEZIUM, options.encoding(), since, (*stored.previous, _without_history(stored))
    )
    logger.warning(
        "envelope.encoding_changed",
        previous=stored.name,
        changes={name: [old, value] for name, old, value in changes},
        since=since,
    )
    return _write(log, pipeline, new)


def _without_history(stored: StoredEncoding) -> dict[str, Any]:
    data = stored.to_json()
    del data["previous"], data["kind"]
    return data


def _write(log: Log, pipeline: str, stored: StoredEncoding) -> StoredEncoding:
    log.ensure_topics([schema_topic(pipeline)])
    tx = log.begin()
    tx.append([encoding_record(pipeline, stored)])
    tx.commit()
    return stored


def _problems(stored: StoredEncoding, changes: list[tuple[str, Any, Any]]) -> list[tuple[str, str]]:
    written = (
        "before the envelope: block existed (the legacy encoding)"
        if stored.name == LEGACY
        else "with other envelope settings"
    )
    problems = [
        (f"envelope.{name}", f"the log was written with {old!r}, the file says {new!r}")
        for name, old, new in changes
    ]
    problems.append(
        (
            "envelope",
            f"the log's topics were written {written}, and one topic must not mix two "
            "encodings. Either set the envelope: block back to the log's settings, or point "
            "log.path at a new log (Kafka: a new pipeline name, so new topics) and snapshot "
            "again; or run `cdc run FILE --accept-envelope-change` to store the new encoding "
            "from the topics' current end offsets on (older records keep the old one)",
        )
    )
    return problems
