"""The HTTP sink's pure parts, without a server: record ids and bodies, message ids, the
Standard Webhooks signature (checked against the standard's published example), Retry-After,
the full-jitter backoff, the answer classes, and the config's secrets."""

from __future__ import annotations

import base64
import random
from email.utils import formatdate

import orjson
import pytest
from pydantic import ValidationError

from sinks.http import HttpSinkConfig, RetryConfig, signing, wire
from sinks.http.retrying import Delays, Outcome, outcome, retry_after_s
from tests.integration.webhook_receiver import documented_verify


def test_signature_matches_the_standard_webhooks_example() -> None:
    # The example of the Standard Webhooks spec and its reference libraries' tests.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    key = signing.signing_key(secret)
    got = signing.sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    assert got == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_the_documented_verify_accepts_the_sinks_signature_and_refuses_a_late_one() -> None:
    verify = documented_verify()
    secret, body = "a-plain-secret-of-24-chars", b'{"records":[]}'
    key = signing.signing_key(secret)
    import time

    now = int(time.time())
    assert verify(secret, signing.headers(key, "msg_1", now, body), body)
    assert not verify(secret, signing.headers(key, "msg_1", now - 301, body), body)
    forged = {**signing.headers(key, "msg_1", now, body), "webhook-id": "msg_2"}
    assert not verify(secret, forged, body)  # the id is signed too


def test_secrets_too_short_or_malformed_are_refused_without_being_quoted() -> None:
    for bad in ("short-secret", "whsec_not base64!", "whsec_" + base64.b64encode(b"x").decode()):
        with pytest.raises(ValidationError) as raised:
            HttpSinkConfig(name="h", url="https://h.test/x", secret=bad)
        # What cdc validate prints (cdc.config.sections: messages without the input).
        shown = str(raised.value.errors(include_url=False, include_input=False))
        assert bad not in shown and "secret" in shown


def test_url_is_checked_and_shown_redacted() -> None:
    with pytest.raises(ValidationError, match="http:// or https://"):
        HttpSinkConfig(name="h", url="ftp://h.test/x", secret="s" * 16)
    config = HttpSinkConfig(
        name="h", url="https://u:pw-9876@h.test/x?token=tk-12345", secret="s" * 16
    )
    assert config.shown_url == "https://h.test/…"
    # Slack's and Discord's webhook URLs carry their token in the path.
    slack = "https://hooks.slack.test:8443/services/T0001/B0002/XyZtokenInThePath42"
    for url, expected in (
        (slack, "https://hooks.slack.test:8443/…"),
        ("http://[::1]:9000/api/webhooks/123/tok-en_value", "http://[::1]:9000/…"),
        ("http://h.test", "http://h.test"),
        ("http://h.test/", "http://h.test"),
    ):
        assert HttpSinkConfig(name="h", url=url, secret="s" * 16).shown_url == expected
    assert "tk-12345" not in repr(config) and "s" * 16 not in repr(config)
    with pytest.raises(ValidationError, match="set by the sink itself"):
        HttpSinkConfig(name="h", url="https://h.test", secret="s" * 16, headers={"Webhook-Id": "x"})


def test_retry_after_in_seconds_or_an_http_date() -> None:
    assert retry_after_s("7") == 7.0
    now = 1_800_000_000.0
    assert retry_after_s(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30, abs=1)
    assert retry_after_s(formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert retry_after_s("soon") is None and retry_after_s(None) is None
    assert retry_after_s("") is None
    assert retry_after_s("-3") is None


def test_backoff_is_capped_full_jitter_and_retry_after_is_capped_too() -> None:
    config = RetryConfig(initial_backoff_s=1, max_backoff_s=8, max_retry_after_s=60)
    delays = Delays(config, random.Random(3))
    waits = [delays.next() for _ in range(40)]
    caps = [min(8.0, 2.0**n) for n in range(40)]  # 1, 2, 4, 8, 8...
    assert all(0 <= w <= cap for w, cap in zip(waits, caps, strict=True))
    assert min(waits[5:]) < 4 < max(waits[5:])  # drawn below the cap, not near it
    assert delays.next(retry_after=600) == 60 and delays.next(retry_after=2) == 2

    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b  # the cap itself

    top = Delays(config, Top())
    assert [top.next() for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    delays.reset()
    assert delays.failures == 0


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, Outcome.DELIVERED),
        (204, Outcome.DELIVERED),
        (500, Outcome.RETRY),
        (503, Outcome.RETRY),
        (408, Outcome.RETRY),
        (429, Outcome.RETRY),
        (400, Outcome.REFUSED),
        (413, Outcome.REFUSED),
        (422, Outcome.REFUSED),
        (401, Outcome.MISCONFIGURED),
        (404, Outcome.MISCONFIGURED),
        (301, Outcome.MISCONFIGURED),
    ],
)
def test_answers(status: int, expected: Outcome) -> None:
    assert outcome(status) is expected


def test_message_id_is_the_same_for_the_same_batch_only() -> None:
    from cdc.contracts.sink import SinkRecord

    def entries(*offsets: int) -> list[wire.Entry]:
        records = [SinkRecord("p.s.t", 0, o, {"id": o}, {"op": "c"}) for o in offsets]
        return [
            wire.Entry(wire.record_id(r, (r.offset, 0)), b"{}", r, ("p.s.t", 0, r.offset))
            for r in records
        ]

    assert wire.message_id(entries(1, 2, 3)) == wire.message_id(entries(1, 2, 3))
    assert wire.message_id(entries(1, 2, 3)) != wire.message_id(entries(1, 3))
    assert wire.message_id(entries(1, 2)) != wire.message_id(entries(1, 2, 3))
    # Same first and last records and length, other records between (partitions interleaved
    # otherwise after a restart): another id, or a receiver would drop the middle ones.
    assert wire.message_id(entries(1, 2, 4)) != wire.message_id(entries(1, 3, 4))


@pytest.mark.parametrize("form", ["rows", "debezium"])
def test_an_id_read_from_the_positions_bytes_is_the_parsed_ones(form: str) -> None:
    from cdc.contracts.sink import SinkRecord

    value = {"op": "u", "after": {"id": 1}, "source": {"pos": [7340032, 3]}}
    stored = SinkRecord("p.s.t", 0, 5, {"id": 1}, value, pos=b"[7340032,3]")
    legacy = SinkRecord("p.s.t", 0, 5, {"id": 1}, value)  # the position in the value only
    odd = SinkRecord("p.s.t", 0, 5, {"id": 1}, value, pos=b'["0/7A0000",3]')  # not integers
    fast, slow, parsed = (wire.entry(r, form, "p.") for r in (stored, legacy, odd))
    assert fast is not None and slow is not None and parsed is not None
    digest = wire.key_digest({"id": 1})
    assert fast.id == slow.id == f"p.s.t:7340032:3:{digest}"
    assert parsed.id == f"p.s.t:0/7A0000:3:{digest}"
    assert orjson.loads(fast.json) == orjson.loads(slow.json)
    assert orjson.loads(fast.json)["position"] == [7340032, 3]
    assert orjson.loads(parsed.json)["position"] == ["0/7A0000", 3]


def test_rows_sharing_a_position_get_distinct_ids_stable_for_each_key() -> None:
    # Every row of a MongoDB snapshot has (position, 0): the position alone gave them one id,
    # and a receiver de-duplicating by id kept one document of the whole collection.
    from cdc.contracts.sink import SinkRecord

    def snapshot_row(offset: int, key: dict[str, object]) -> SinkRecord:
        value = {"op": "r", "after": key, "source": {"connector": "mongodb"}}
        return SinkRecord("p.db.c", 0, offset, key, value, pos=b"[7301444403200000001,0]")

    keys: list[dict[str, object]] = [{"_id": f"k{n}"} for n in range(500)]
    keys += [{"a": 1, "b": 2}, {"a": 2, "b": 1}, {"id": 1}, {"id": "1"}]
    entries = [wire.entry(snapshot_row(n, k), "rows", "p.") for n, k in enumerate(keys)]
    assert len({e.id for e in entries if e is not None}) == len(keys)
    # Stable: the same key (in any member order, at any offset) is the same id.
    again = wire.entry(snapshot_row(9_999, {"b": 1, "a": 2}), "rows", "p.")
    first = wire.entry(snapshot_row(501, {"a": 2, "b": 1}), "rows", "p.")
    assert again is not None and first is not None and again.id == first.id
    tombstone = SinkRecord("p.db.c", 0, 7, {"_id": "k3"}, None, pos=b"[7301444403200000001,0]")
    twin = wire.entry(tombstone, "debezium", "p.")
    assert twin is not None and twin.id == wire.entry(snapshot_row(3, keys[3]), "rows", "p.").id
