"""The HTTP webhook sink against a real HTTP server in the test process
(:mod:`tests.integration.webhook_receiver`): the conformance kit in both formats, the body
(ids, deletes by key, tombstones, truncates), signatures checked with the documented function,
and ``cdc doctor``. Faults, retries and bad records are in ``test_http_sink_faults.py``; the
pure parts (ids, signing, backoff, config) in ``test_http_sink_wire.py``.

The kit's store is the receiver's: it applies each record by source position, as the docs tell
a receiver to, so the kit's checks of replays, late older changes and deletes hold of what a
receiver following the docs ends up with.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest

from cdc.contracts.errors import SinkFatal
from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.sink import Sink, SinkContext, SinkRecord
from cdc.log.base import TopicPartition
from cdc.testing.conformance import TABLE, TOPIC, SinkConformance, change
from sinks.http import HttpSink, HttpSinkConfig, HttpSinkPlugin, RetryConfig, wire
from tests.integration.webhook_receiver import Receiver, documented_verify

SECRET = "whsec_" + base64.b64encode(b"conformance-kit-key-0123").decode()
FAST = RetryConfig(initial_backoff_s=0.01, max_backoff_s=0.05)


def config(url: str, **options: Any) -> HttpSinkConfig:
    return HttpSinkConfig(name="kit", url=url, secret=SECRET, retry=FAST, **options)


class TestHttpConformanceRows(SinkConformance):
    form = "rows"

    @pytest.fixture(autouse=True)
    def _receiver(self) -> Iterator[None]:
        self.receiver = Receiver(SECRET)
        yield
        self.receiver.close()
        assert self.receiver.bad_signatures == 0
        assert self.receiver.conflicts == []  # an id delivered again carries the same record

    def make_sink(self, context: SinkContext) -> Sink:
        return HttpSink(config(self.receiver.url, format=self.form), context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        rows = self.receiver.rows("public.kit_items")
        return {orjson.loads(key)["id"]: row for key, row in rows.items()}

    @contextmanager
    def outage(self) -> Iterator[None]:
        self.receiver.down = True  # the real server answers 503 to everything
        try:
            yield
        finally:
            self.receiver.down = False

    def test_kit_reset_table_forgets_it_and_rebuilds_it_from_the_log(self) -> None:
        # Replaces the kit's check: a receiver's store is not the sink's to empty, and the
        # sink keeps no offsets, so the runner refuses the reset (sink_resets: "keeps no
        # offsets with its data") and the sink itself says why if called anyway.
        sink = self.make_sink(self.context())
        sink.open()
        assert sink.stored_offsets() is None
        with pytest.raises(SinkFatal, match=r"cannot reset public\.kit_items"):
            sink.reset_table(TABLE, [TopicPartition(TOPIC, 0)])
        sink.close()


class TestHttpConformanceDebezium(TestHttpConformanceRows):
    form = "debezium"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(SECRET)
    yield found
    found.close()
    assert found.conflicts == []


def _sent(receiver: Receiver, kit: SinkConformance, sink: HttpSink, *events: ChangeEvent) -> None:
    sink.write(kit.records(*events))
    sink.flush()


def _kit() -> SinkConformance:
    kit = SinkConformance()
    kit.setup_kit(__import__("pathlib").Path("/nonexistent"))  # records only: no log is made
    return kit


def _id(position: int, key: dict[str, Any] | None) -> str:
    return f"{TOPIC}:{position}:0:{wire.key_digest(key)}"


def _raw(receiver: Receiver) -> list[dict[str, Any]]:
    return [orjson.loads(receiver.content[i]) for r in receiver.requests for i in r.ids]


def test_rows_body_delete_by_key_truncate_sent_tombstone_folded(receiver: Receiver) -> None:
    kit = _kit()
    sink = HttpSink(config(receiver.url, format="rows"), kit.context())
    sink.open()
    truncate = ChangeEvent(
        Op.TRUNCATE, None, None, None, SourceInfo("kit", "kit", *TABLE, 0, 30, 0)
    )
    _sent(receiver, kit, sink, change(1, Op.CREATE, 10, "a", 1), change(1, Op.DELETE, 20))
    _sent(receiver, kit, sink, change(2, Op.CREATE, 25, "b", 2), truncate)
    sink.close()
    sent = _raw(receiver)
    assert [(r["op"], r["key"], r["row"]) for r in sent] == [
        ("c", {"id": 1}, {"id": 1, "name": "a", "qty": 1}),
        ("d", {"id": 1}, {"id": 1}),  # the key alone: never the delete's before
        ("c", {"id": 2}, {"id": 2, "name": "b", "qty": 2}),
        ("t", None, None),
    ]  # the delete's tombstone, right after it, is folded into it
    keys = ({"id": 1}, {"id": 1}, {"id": 2}, None)
    assert [r["id"] for r in sent] == [
        _id(p, k) for p, k in zip((10, 20, 25, 30), keys, strict=True)
    ]
    assert [r["position"] for r in sent] == [[p, 0] for p in (10, 20, 25, 30)]
    assert {r["table"] for r in sent} == {"public.kit_items"}
    assert receiver.rows("public.kit_items") == {}  # the truncate emptied the table


def test_debezium_body_is_the_key_and_the_value_as_the_log_holds_it(receiver: Receiver) -> None:
    kit = _kit()
    sink = HttpSink(config(receiver.url), kit.context())
    sink.open()
    records = kit.records(change(1, Op.CREATE, 10, "a", 1), change(1, Op.DELETE, 11))
    sink.write(records)
    sink.flush()
    sink.close()
    sent = _raw(receiver)
    assert [(r["key"], r["value"]) for r in sent] == [(r.key, r.value) for r in records[:2]]
    assert records[2].value is None and len(sent) == 2  # the tombstone, folded into its delete
    assert sent[0]["topic"] == TOPIC


@pytest.mark.parametrize("form", ["rows", "debezium"])
def test_a_tombstone_is_its_delete_under_the_deletes_id(receiver: Receiver, form: str) -> None:
    # Compaction may take a delete while the sink is behind: its tombstone, read alone, is the
    # delete, under the delete's id.
    kit = _kit()
    sink = HttpSink(config(receiver.url, format=form), kit.context())
    sink.open()
    _sent(receiver, kit, sink, change(1, Op.CREATE, 10, "a", 1), change(2, Op.CREATE, 11, "b", 2))
    _, tombstone = kit.records(change(1, Op.DELETE, 12))
    other_delete, other_tombstone = kit.records(change(2, Op.DELETE, 13))
    for batch in ([tombstone], [other_delete], [other_tombstone]):
        sink.write(batch)
        sink.flush()
    # Read on by the same sink, a tombstone right after its delete is folded into it; read by
    # a sink restarted between the two, it comes as a twin.
    sink.close()
    sink = HttpSink(config(receiver.url, format=form), kit.context())
    sink.open()
    sink.write([other_tombstone])
    sink.flush()
    sink.close()
    assert receiver.rows("public.kit_items") == {}
    sent = _raw(receiver)[2:]
    ids = [_id(12, {"id": 1}), _id(13, {"id": 2}), _id(13, {"id": 2})]
    assert [r["id"] for r in sent] == ids and sent[0]["position"] == [12, 0]
    assert receiver.received[ids[1]] == 2  # in rows, with the same content (no conflict)
    if form == "rows":
        assert sent[0] == {**sent[0], "op": "d", "key": {"id": 1}, "row": {"id": 1}}
    else:
        assert (sent[0]["topic"], sent[0]["key"], sent[0]["value"]) == (TOPIC, {"id": 1}, None)


def test_batches_of_batch_size_signed_and_verified_by_the_documented_code(
    receiver: Receiver,
) -> None:
    kit = _kit()
    sink = HttpSink(config(receiver.url, batch_size=3), kit.context())
    sink.open()
    _sent(receiver, kit, sink, *(change(k, Op.CREATE, 10 + k, "n", k) for k in range(1, 8)))
    sink.close()
    assert [len(r.ids) for r in receiver.requests] == [3, 3, 1]
    assert receiver.bad_signatures == 0  # each was checked by the docs' verify()
    assert len({r.message_id for r in receiver.requests}) == 3
    # The documented check refuses a body changed in transit and another key.
    verify = documented_verify()
    headers, body = _signed(b'{"records":[]}')
    assert verify(SECRET, headers, body)
    assert not verify(SECRET, headers, body + b" ")
    assert not verify("whsec_" + base64.b64encode(b"x" * 24).decode(), headers, body)


def _signed(body: bytes) -> tuple[dict[str, str], bytes]:
    import time

    from sinks.http import signing

    key = signing.signing_key(SECRET)
    return signing.headers(key, "msg_test", int(time.time()), body), body


def test_a_retried_batch_keeps_its_id_and_a_batch_cut_otherwise_its_records_ids(
    receiver: Receiver,
) -> None:
    kit = _kit()
    records = kit.records(*(change(k, Op.CREATE, 10 + k, "n", k) for k in range(1, 7)))
    for size in (4, 4, 3):  # a replay of the same batches, then batches cut differently
        sink = HttpSink(config(receiver.url, batch_size=size), kit.context())
        sink.open()
        sink.write(records)
        sink.flush()
        sink.close()
    first, again, cut = (receiver.requests[i : i + 2] for i in (0, 2, 4))
    assert [r.message_id for r in first] == [r.message_id for r in again]
    assert {r.message_id for r in cut}.isdisjoint(r.message_id for r in first)
    assert [i for r in cut for i in r.ids] == [i for r in first for i in r.ids]
    assert set(receiver.received.values()) == {3}


def test_doctor_pings_with_a_signed_empty_batch(receiver: Receiver) -> None:
    url = receiver.url + "?token=hunter2-token-value"
    checks = HttpSinkPlugin.doctor(config(url), "kit")
    assert [c.ok for c in checks] == [True], checks
    assert receiver.pings == 1 and receiver.bad_signatures == 0
    wrong = HttpSinkConfig(name="kit", url=url, secret="another-secret-of-sixteen")
    refused = HttpSinkPlugin.doctor(wrong, "kit")[0]
    assert not refused.ok and "HTTP 400" in refused.detail and refused.fix
    receiver.plan("401")
    assert "HTTP 401" in HttpSinkPlugin.doctor(config(url), "kit")[0].detail
    receiver.close()
    gone = HttpSinkPlugin.doctor(config(url, timeout_s=0.5), "kit")[0]
    assert not gone.ok and "ConnectError" in gone.detail
    for check in (refused, gone, *checks):
        assert "hunter2" not in f"{check.detail} {check.fix}"
    remote = HttpSinkConfig(name="kit", url="http://192.0.2.1:9/x", secret=SECRET, timeout_s=0.2)
    assert any(c.warning and c.name == "transport" for c in HttpSinkPlugin.doctor(remote, "kit"))


def test_records_without_a_position_get_their_log_place_as_id(receiver: Receiver) -> None:
    kit = _kit()
    sink = HttpSink(config(receiver.url, format="rows"), kit.context())
    sink.open()
    legacy = SinkRecord(TOPIC, 0, 41, {"id": 9}, {"op": "c", "after": {"id": 9}})
    sink.write([legacy])
    sink.flush()
    sink.close()
    assert receiver.requests[0].ids == [f"{TOPIC}/0/41"]
