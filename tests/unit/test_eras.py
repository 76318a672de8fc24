"""Which stored encoding each record was written under (cdc.log.eras), and the readers that
decode by it: the sink task's records, DuckDB's runs and ``cdc verify``'s rows."""

from __future__ import annotations

from typing import Any

import orjson

from cdc.cli.verify.compare import compare_table
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import SinkContext, SinkRecord, record_options
from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE
from cdc.log.base import StoredRecord
from cdc.log.encoding import DEBEZIUM, LEGACY, StoredEncoding
from cdc.log.eras import Eras, eras_of
from cdc.runtime.sink_task import decode_records
from sinks.duckdb.stage import encoding_runs

T, U = "p.public.t", "p.public.u"
HEX = READABLE.model_copy(update={"binary_handling_mode": "hex"})


def _entry(stored: StoredEncoding) -> dict[str, Any]:
    data = stored.to_json()
    del data["previous"], data["kind"]
    return data


def _history() -> Eras:
    """legacy, then the defaults from t/0 = 5 and t/1 = 2, then readable-hex from t/0 = 9 and
    u/0 = 3 (u created under the defaults; t/1 written to no more)."""
    legacy = StoredEncoding(LEGACY)
    defaults = StoredEncoding(DEBEZIUM, DEBEZIUM_DEFAULTS.encoding(), {T: {"0": 5, "1": 2}})
    newest = StoredEncoding(
        DEBEZIUM,
        HEX.encoding(),
        {T: {"0": 9, "1": 2}, U: {"0": 3}},
        (_entry(legacy), _entry(defaults)),
    )
    return Eras(newest)


def _options(eras: Eras, topic: str, partition: int, offset: int) -> Any:
    return eras.at(topic, partition, offset)[0].options


def test_each_offset_is_in_the_era_it_was_written_under() -> None:
    eras = _history()
    legacy, defaults, newest = reversed(eras.all)
    assert legacy.options is None and not legacy.only
    assert [eras.at(T, 0, o)[0] for o in (0, 4, 5, 8, 9, 10**9)] == [
        legacy,
        legacy,
        defaults,
        defaults,
        newest,
        newest,
    ]
    assert eras.at(T, 0, 4)[1] == 5 and eras.at(T, 0, 6)[1] == 9  # where the run ends
    # t/1 had 2 records at both changes: nothing was written to it under the defaults.
    assert [eras.at(T, 1, o)[0] for o in (1, 2)] == [legacy, newest]
    # u did not exist before the defaults: it starts in them, not in legacy.
    assert [eras.at(U, 0, o)[0] for o in (0, 2, 3)] == [defaults, defaults, newest]
    # A topic or partition created after the last change is all in the newest.
    assert eras.at("p.public.v", 0, 0)[0] is newest and eras.at(T, 7, 0)[0] is newest
    assert _options(eras, T, 0, 6) == DEBEZIUM_DEFAULTS.model_copy(
        update={"skipped_operations": "none"}
    )


def test_a_topic_created_again_after_a_change_is_in_the_newer_era() -> None:
    old = StoredEncoding(DEBEZIUM, READABLE.encoding(), {T: {"0": 50}})
    new = StoredEncoding(
        DEBEZIUM, HEX.encoding(), {}, (_entry(StoredEncoding(LEGACY)), _entry(old))
    )
    eras = Eras(new)  # t was dropped and created again: the newest starts at 0
    assert eras.at(T, 0, 60)[0] is eras.newest and eras.at(T, 0, 0)[0] is eras.newest


def _stored(topic: str, partition: int, offset: int) -> StoredRecord:
    value = orjson.dumps({"after": {"id": offset}, "op": "c", "source": {"pos": [offset, 0]}})
    return StoredRecord(topic, partition, offset, b'{"id":1}', value, 0)


def test_records_get_their_era_across_partitions_and_boundaries() -> None:
    eras = _history()
    legacy, defaults, newest = reversed(eras.all)
    places = [(T, 0, 3), (T, 1, 1), (T, 0, 4), (T, 0, 5), (U, 0, 2), (T, 0, 9), (U, 0, 3)]
    records = decode_records([_stored(*p) for p in places], eras)
    assert [r.era for r in records] == [legacy, legacy, legacy, defaults, defaults, newest, newest]
    assert decode_records([_stored(T, 0, 1)])[0].era is None  # no stored encoding: not known


def test_a_log_with_one_encoding_needs_no_lookup() -> None:
    eras = eras_of(StoredEncoding(DEBEZIUM, READABLE.encoding()))
    assert eras is not None and eras.newest.only
    records = decode_records([_stored(T, p, o) for p, o in [(0, 0), (2, 9)]], eras)
    assert {id(r.era) for r in records} == {id(eras.newest)}
    assert eras_of(None) is None


def test_duckdb_decodes_each_run_under_its_own_options() -> None:
    eras = _history()
    records = decode_records([_stored(T, 0, o) for o in (3, 4, 5, 6, 9, 10)], eras)
    runs = encoding_runs(records, READABLE)
    legacy, defaults, newest = (era.options for era in reversed(eras.all))
    assert runs == [(legacy, 0, 2), (defaults, 2, 4), (newest, 4, 6)]
    unknown = [SinkRecord(T, 0, n, {}, {}) for n in range(3)]
    assert encoding_runs(unknown, HEX) == [(HEX, 0, 3)]
    assert encoding_runs([], HEX) == []
    context = SinkContext("p", "s", [], {}, None, HEX)  # type: ignore[arg-type]
    assert record_options(unknown[0], context) is HEX
    assert record_options(records[0], context) is None  # legacy


SCHEMA = TableSchema(
    "postgresql",
    "public",
    "t",
    (Column("id", "integer", key=True), Column("price", "numeric(12,2)"), Column("blob", "bytea")),
)


def test_verify_reads_a_row_in_the_encoding_it_was_stored_in() -> None:
    from cdc.cli.verify.compare import _row_decoding

    source = [({"id": 1}, {"id": 1, "price": "1.50", "blob": "deadbeef"})]  # readable-hex
    old = {"id": 1, "price": "AJY=", "blob": "3q2+7w=="}  # the defaults: base64 both
    decodings = [_row_decoding(SCHEMA, HEX), _row_decoding(SCHEMA, DEBEZIUM_DEFAULTS)]
    decoded_source = [(k, decodings[0](r)) for k, r in source]

    def compare(sink_row: dict[str, Any], ways: list[Any]) -> Any:
        return compare_table(
            "public.t",
            "cache",
            SCHEMA,
            lambda: decoded_source,
            lambda: [({"id": 1}, sink_row)],
            attempts=1,
            sink_decodings=ways,
        )

    assert compare(old, decodings).ok
    assert not compare(old, decodings[:1]).ok  # under the newest alone it differs
    wrong = {**old, "price": "AJc="}  # 1.51 under the old encoding: differs under both
    result = compare(wrong, decodings)
    assert result.different == [{"id": 1}]
    assert result.details[0]["columns"]["price"]["sink"] is not None
