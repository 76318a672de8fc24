"""``provide.transaction.metadata``: each change's ``transaction`` block, and each
transaction's BEGIN and END on the ``<pipeline>.transaction`` topic, as Debezium writes them.

A change's block is ``{"id": "<txId>:<position>", "total_order": n, "data_collection_order":
m}`` (PostgreSQL's position is the commit LSN, so the id is Debezium's ``"<txId>:<lsn>"``);
``n`` counts the transaction's changes from 1, ``m`` its changes of that table. The BEGIN
record comes before the transaction's first change, the END after its last, keyed ``{"id"}``:

    {"status":"BEGIN","id":...,"event_count":null,"data_collections":null,"ts_ms":<commit>}
    {"status":"END","id":...,"event_count":n,
     "data_collections":[{"data_collection":"<schema>.<table>","event_count":k},...],"ts_ms":...}

in the ``{"schema", "payload"}`` wrapper under ``schemas.enable``
(:data:`cdc.envelope.connect_schema.TRANSACTION_RECORDS`), as Debezium 3.6.1 wrote them. One
deviation: Debezium's PostgreSQL connector writes each change's own LSN into the id of its block and
of the BEGIN record (``"731:26384296"``, ``"731:26384424"``, ... and the END ``"731:26384768"``),
so ids of one transaction differ and no change's id matches its END's; ours are the
transaction's one id, the END's (the commit LSN), everywhere.

A transaction ends where the next one starts or where a batch stores offsets (a source stores
them only at a transaction boundary), so a transaction spread over several batches has one
BEGIN and one END. Only streamed changes of a source transaction take part (``source.tx_id``
set, ``source.snapshot`` ``"false"``): snapshot rows keep a null block, as Debezium's do. The
operations ``skipped.operations`` names are neither written nor counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from cdc.contracts.events import ChangeEvent
from cdc.envelope import encode as envelope
from cdc.envelope.connect_schema import TRANSACTION_RECORDS
from cdc.envelope.options import EnvelopeOptions
from cdc.log.base import Record


def transaction_topic(pipeline: str) -> str:
    """The topic of the BEGIN and END records: ``<pipeline>.transaction`` (Debezium's)."""
    return f"{pipeline}.transaction"


@dataclass(slots=True)
class _Open:
    id: str
    ts_ms: int
    total: int = 0
    tables: dict[str, int] = field(default_factory=dict)


class TransactionMetadata:
    """Adds the blocks and the BEGIN/END records to a source's batches, in order.

    Args:
        pipeline: the pipeline (topic names, the ``source`` block's ``name``).
        options: the pipeline's envelope options.
    """

    def __init__(self, pipeline: str, options: EnvelopeOptions) -> None:
        self._pipeline, self._options = pipeline, options
        self.topic = transaction_topic(pipeline)
        self._open: _Open | None = None

    def records(self, events: Iterable[ChangeEvent], now_ms: int, ends: bool) -> list[Record]:
        """The records of ``events`` with their blocks and the BEGIN/END records between them;
        ``ends``: the batch ends on a transaction boundary (it stores offsets)."""
        out: list[Record] = []
        skipped = self._options.skipped
        for event in events:
            if skipped and event.op in skipped:
                continue
            src = event.source
            if src.tx_id is not None and src.snapshot == "false":
                self._block(event, out)
            out.extend(envelope.to_records(event, self._pipeline, now_ms, self._options))
        if ends:
            self._end(out)
        return out

    def _block(self, event: ChangeEvent, out: list[Record]) -> None:
        src = event.source
        tx_id = f"{src.tx_id}:{src.position}"
        current = self._open
        if current is None or current.id != tx_id:
            self._end(out)
            current = self._open = _Open(tx_id, src.ts_ms)
            out.append(self._record(current, "BEGIN", None, None))
        table = f"{src.schema}.{src.table}"
        current.total += 1
        current.tables[table] = in_table = current.tables.get(table, 0) + 1
        event.encoded = None  # the source's own bytes have a null block
        event.transaction = {
            "id": tx_id,
            "total_order": current.total,
            "data_collection_order": in_table,
        }

    def _end(self, out: list[Record]) -> None:
        current, self._open = self._open, None
        if current is None:
            return
        collections = [{"data_collection": t, "event_count": n} for t, n in current.tables.items()]
        out.append(self._record(current, "END", current.total, collections))

    def _record(
        self, tx: _Open, status: str, count: int | None, collections: list[dict[str, object]] | None
    ) -> Record:
        value = {
            "status": status,
            "id": tx.id,
            "event_count": count,
            "data_collections": collections,
            "ts_ms": tx.ts_ms,
        }
        key, data = envelope.dumps({"id": tx.id}), envelope.dumps(value)
        if self._options.schemas_enable:
            key = TRANSACTION_RECORDS.wrap_key(key)
            data = TRANSACTION_RECORDS.wrap_value(data)
        return Record(self.topic, key, envelope.exact(data))
