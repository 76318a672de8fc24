"""The ``mongodb`` entry point of ``cdc.sources``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from cdc.contracts.errors import ConfigError
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.support import lazy
from connectors.mongodb.config import MongoSourceConfig

# What runs the source is imported by the method that needs it: a command that only reads the
# pipeline's file loads the config, not pymongo's client and the change-stream machinery.
if TYPE_CHECKING:
    from cdc.contracts.checks import Check
    from cdc.contracts.source import SourceContext
    from connectors.mongodb.fence import ClusterTime, CurrentPosition
    from connectors.mongodb.positions import MongoPosition
    from connectors.mongodb.source import MongoSource


class MongoSourcePlugin:
    """Builds :class:`MongoSource`; reads collections back for ``cdc verify``."""

    config_model = MongoSourceConfig

    #: The sinks' rows of its records: Debezium's Extended JSON texts as objects.
    #: The sinks' rows of its records: Debezium's Extended JSON texts as objects.
    record_rows = lazy.Attribute("connectors.mongodb.extended_json", "rows")

    @staticmethod
    def create(config: MongoSourceConfig, context: SourceContext) -> MongoSource:
        """A source for ``config``; nothing connects before ``open``."""
        from connectors.mongodb.source import MongoSource

        return MongoSource(config, context)

    @staticmethod
    def request_snapshot(
        config: MongoSourceConfig, pipeline_name: str, table: str, where: str | None
    ) -> dict[str, Any]:
        """Ask the running pipeline to re-read ``table`` (``cdc snapshot``), through the signal
        collection its streams watch.

        Raises:
            ConfigError: no signal collection, a table not captured, or a ``--where`` filter.
            SourceUnavailable: the server cannot be reached.
        """
        problems = _request_problems(config, table, "request snapshots")
        if where is not None:
            problems.append(("--where", "not supported by the MongoDB source"))
        if problems:
            raise ConfigError(problems)
        return _write_request(config, pipeline_name, {"table": table}, "a snapshot request")

    @staticmethod
    def request_repair(
        config: MongoSourceConfig, pipeline_name: str, table: str, keys: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Ask the running pipeline to re-read ``keys`` of ``table`` and delete those it lacks
        (``cdc verify --repair``), through the signal collection (:mod:`.repair`). Each key is
        ``cdc verify``'s canonical JSON of the record key, ``{"_id": ...}``.

        Returns:
            The request: ``{"id", "lsn", "keys", "ids"}`` (how many keys, and how many ``_id``
            values they stand for).

        Raises:
            ConfigError: no signal collection, a table not captured or never snapshotted, a
                hashed ``_id`` (the sinks' keys cannot be turned back into ``_id`` values), or
                a key that is no ``_id``.
            SourceUnavailable: the server cannot be reached.
        """
        from connectors.mongodb import repair

        problems = _request_problems(config, table, "repair keys")
        if table in config.table_names and "_id" in config.table_entry(table).mask:
            problems.append(
                ("--table", f"{table!r} hashes _id: its keys cannot be read back by value")
            )
        ids: list[list[str]] = []
        try:
            ids = repair.request_ids(keys)
        except repair.BadKey as exc:
            problems.append(("keys", str(exc)))
        if problems:
            raise ConfigError(problems)
        request = {"table": table, "ids": ids}
        written = _write_request(config, pipeline_name, request, "a repair request")
        return {**written, "keys": len(ids), "ids": sum(map(len, ids))}

    @staticmethod
    def read_rows(
        config: MongoSourceConfig,
        schema: str,
        table: str,
        *,
        envelope: EnvelopeOptions = READABLE,
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(key, document)`` of every document of ``schema.table`` (database, collection)
        that its row filter lets through, without the fields left out and with the masked ones
        masked, as the pipeline's records hold them, in the JSON form the envelope's ``after``
        uses (the same under every ``envelope``: MongoDB's documents are Extended JSON text
        whatever the converter options).

        Raises:
            SourceUnavailable: the server cannot be reached.
        """
        from pymongo import errors as px

        from cdc.config.pipeline import redact_url
        from connectors.mongodb import errors
        from connectors.mongodb.client import client_for
        from connectors.mongodb.convert import document
        from connectors.mongodb.filters import compile_filter

        where = redact_url(config.dsn.get_secret_value())
        pre_images = config.full_document == "required"
        entry = config.table_entry(f"{schema}.{table}")
        table_filter = compile_filter(entry, config.mask_key_bytes(), pre_images)
        query, projection = table_filter.find_filter({}), table_filter.projection()
        client = client_for(config)
        try:
            for doc in client[schema][table].find(query, projection).batch_size(5000):
                if not table_filter.matches(doc):
                    continue
                key = table_filter.key(doc["_id"])
                yield key, document(table_filter.document(doc))
        except px.PyMongoError as exc:
            raise errors.translate(exc, where, f"reading {schema}.{table}") from exc
        finally:
            client.close()

    @staticmethod
    def status(
        config: MongoSourceConfig, pipeline: str, offsets: Mapping[str, Any]
    ) -> dict[str, Any]:
        """What ``cdc status`` shows: stream points, snapshot progress, history-lost notes
        (from the stored offsets only, so it works while the server is down)."""
        from connectors.mongodb import positions

        entry = positions.stored(offsets)
        report: dict[str, Any] = {
            "streams": {
                sid: s.get("at") or s.get("cluster_time")
                for sid, s in entry.get("streams", {}).items()
            }
        }
        snap = entry.get("snapshot")
        if snap:
            report["snapshot"] = {
                table: {
                    "ranges_done": sum(1 for r in info["ranges"] if r["done"]),
                    "ranges": len(info["ranges"]),
                    "rows": info["rows"],
                    "rows_per_s": info.get("rows_per_s"),
                    "eta_s": info.get("eta_s"),
                }
                for table, info in snap["collections"].items()
            }
        if entry.get("last_snapshot"):
            report["last_snapshot"] = entry["last_snapshot"]
        if entry.get("history_lost"):
            report["history_lost"] = entry["history_lost"]
        return report

    @staticmethod
    def position(offsets: Mapping[str, Any]) -> MongoPosition | None:
        """The streams' points the stored offsets hold (read-your-writes fences,
        :mod:`cdc.fence`; :mod:`connectors.mongodb.fence`)."""
        from connectors.mongodb.fence import stored_position

        return stored_position(offsets)

    @staticmethod
    def parse_position(text: str) -> MongoPosition | ClusterTime:
        """A position as ``cdc status`` prints it, or a cluster time (``Timestamp(T, I)``),
        for ``cdc wait --position``."""
        from connectors.mongodb.fence import parse_position

        return parse_position(text)

    @staticmethod
    def current_position(config: MongoSourceConfig) -> ClusterTime:
        """The server's cluster time at the call, for ``cdc wait --now`` (a replica set's or
        sharded cluster's, on a client of its own; a server that reports none is refused)."""
        from cdc.fence import read_once
        from connectors.mongodb.fence import CurrentPosition

        return read_once(CurrentPosition(config))

    @staticmethod
    def position_reader(config: MongoSourceConfig) -> CurrentPosition:
        """Reads the cluster time on one kept client, for many fences."""
        from connectors.mongodb.fence import CurrentPosition

        return CurrentPosition(config)

    @staticmethod
    def doctor(config: MongoSourceConfig, pipeline_name: str) -> list[Check]:
        """The preflight checks of ``cdc doctor`` (:mod:`connectors.mongodb.doctor`)."""
        from connectors.mongodb.doctor import doctor

        return doctor(config, pipeline_name)


def _request_problems(config: MongoSourceConfig, table: str, what: str) -> list[tuple[str, str]]:
    """What keeps a request for ``table`` from being carried out, with its place."""
    problems = []
    if config.signal() is None:
        problems.append(("source.signal_collection", f"set one to {what}"))
    if table not in config.table_names:
        problems.append(("--table", f"{table!r} is not a captured collection"))
    elif not config.table_entry(table).allows("r"):
        problems.append(("--table", f"{table!r} has ops without r: it is never snapshotted"))
    return problems


def _write_request(
    config: MongoSourceConfig, pipeline_name: str, fields: dict[str, Any], what: str
) -> dict[str, str]:
    """Insert a snapshot request with ``fields`` into the signal collection."""
    from pymongo import errors as px

    from cdc.config.pipeline import redact_url
    from connectors.mongodb import errors
    from connectors.mongodb.client import client_for

    signal = config.signal()
    assert signal is not None  # checked by the caller
    now = time.time()
    request = {
        "_id": uuid.uuid4().hex,
        "type": "snapshot",
        **fields,
        "pipeline": pipeline_name,
        "requested_ms": int(now * 1000),
    }
    where = redact_url(config.dsn.get_secret_value())
    client = client_for(config)
    try:
        client[signal[0]][signal[1]].insert_one(request)
    except px.PyMongoError as exc:
        raise errors.translate(exc, where, f"writing {what}") from exc
    finally:
        client.close()
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    return {"id": request["_id"], "lsn": f"{config.signal_collection} {at}"}
