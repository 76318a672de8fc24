"""MongoDB filters against a real server (mongo-java-server, or ``CDC_TEST_MONGO_URI``) through
``MongoSource`` into a real ``EmbeddedLog``: nothing left out or masked reaches any byte of the
log's files or any log line, a hashed ``_id`` keys a document alike in snapshot and stream,
rows move in and out of a row filter, ``ops`` without ``r`` reads nothing, a changed filter is
re-read, ``cdc verify``'s ``read_rows`` applies the same filters, and a transform keeps
Debezium's string document."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pymongo
import pytest
from structlog.testing import capture_logs

from cdc.contracts.errors import ConfigError
from cdc.contracts.events import ChangeEvent, Op
from cdc.envelope import encode as envelope
from cdc.envelope.json_rows import EncodedRow
from cdc.runtime.fingerprints import OFFSET_KEY
from cdc.transforms.chain import build_chain
from cdc.transforms.fields import RenameFieldsConfig
from cdc.transforms.route import RouteConfig
from connectors.mongodb import MongoSourcePlugin
from tests.integration.mongo_kit import Harness, database, harness, into_next_second, is_real, scope

pytestmark = pytest.mark.timeout(120)

MASK_KEY = "integration-mask-key-0123456789"


def hashed(text: str) -> str:
    return hmac.new(MASK_KEY.encode(), text.encode(), hashlib.sha256).hexdigest()


class Secrets:
    """Raw values that must never leave the source, each unique to the test."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:12]
        self.password = f"PWSECRET{tag}"
        self.new_password = f"PWNEWSECRET{tag}"
        self.salt = f"SALTSECRET{tag}"
        self.email = f"ada.{tag}@example.com"
        self.new_email = f"ada.new.{tag}@example.com"
        self.phone = f"+47 {tag[:3]} 0199"
        self.note = f"NOTESECRET{tag}"
        self.ssn = f"SSN{tag}"
        self.unmatched = f"NOMATCH{tag}"
        self.account = f"ACCTSECRET{tag}"

    def all(self) -> list[str]:
        return [v for k, v in vars(self).items() if not k.startswith("_")]


def users_entry(db: str) -> dict[str, Any]:
    return {
        "name": f"{db}.users",
        "columns": {"exclude": ["password_hash"]},
        "mask": {
            "email": "hash",
            "ssn": "redact",
            "phone": {"type": "keep_last", "n": 4},
            "notes": None,
        },
        "where": {"tenant_id": 42, "deleted": {"$ne": True}},
    }


def user(n: int, s: Secrets, tenant: int = 42) -> dict[str, Any]:
    return {
        "_id": n,
        "tenant_id": tenant,
        "name": f"user {n}" if tenant == 42 else s.unmatched,
        "email": s.email,
        "password_hash": {"hash": s.password, "salt": s.salt},
        "ssn": s.ssn,
        "phone": s.phone,
        "notes": s.note,
    }


def log_bytes(directory: Path) -> bytes:
    """Every byte of every file the log keeps (database, -wal, -shm)."""
    return b"".join(p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file())


def assert_absent(secrets: list[str], *haystacks: bytes | str) -> None:
    for haystack in haystacks:
        data = haystack.encode() if isinstance(haystack, str) else haystack
        leaked = [s for s in secrets if s.encode() in data]
        assert not leaked, f"raw values leaked: {leaked}"


@pytest.fixture
def client(mongo_server: Any) -> Iterator[pymongo.MongoClient[dict[str, Any]]]:
    with pymongo.MongoClient(mongo_server.uri) as mongo:
        yield mongo


def _exercise_users(db: Any, h: Harness, s: Secrets) -> None:
    """Snapshot rows, then every kind of change a filtered collection can see (one at a time:
    ``updateLookup`` reads the document when the change is read)."""
    h.open()
    h.collect(2)  # the snapshot's rows of _id 1 and 2 (10 is another tenant's)
    writes = [
        lambda: db.users.insert_one(user(3, s)),
        lambda: db.users.insert_one(user(4, s, tenant=7)),  # never matches: nothing
        lambda: db.users.update_one({"_id": 3}, {"$set": {"password_hash.hash": s.new_password}}),
        lambda: db.users.update_one(
            {"_id": 3}, {"$set": {"email": s.new_email, "password_hash": s.salt}}
        ),
        lambda: db.users.replace_one({"_id": 1}, user(1, s) | {"name": "replaced"}),
        lambda: db.users.update_one({"_id": 4}, {"$set": {"visits": 1}}),  # still out
        lambda: db.users.delete_one({"_id": 2}),
        lambda: db.users.insert_one({"_id": 99, "tenant_id": 42, "done": True}),
    ]
    expected = [3, 3, 4, 5, 6, 7, 8, 9]  # events so far after each write
    for write, count in zip(writes, expected, strict=True):
        write()
        if count > len(h.events):
            h.collect(count)


def test_left_out_and_masked_values_never_reach_the_log_files(
    mongo_server: Any, tmp_path: Path
) -> None:
    s = Secrets()
    log_dir = tmp_path / "log"
    with database(mongo_server.uri) as db:
        db.users.insert_many([user(1, s), user(2, s), user(10, s, tenant=7)])
        into_next_second()  # the fake server's start point is to the second: replay nothing
        options = {"stream_scope": scope(mongo_server), "mask_key": MASK_KEY}
        tables = [users_entry(db.name)]
        with (
            capture_logs() as logs,
            harness(mongo_server.uri, log_dir, tables, snapshot="initial", **options) as h,
        ):
            _exercise_users(db, h, s)
            files_while_open = log_bytes(log_dir)
            rows = list(MongoSourcePlugin.read_rows(h.config, db.name, "users"))
            state = latest(h.events)
        files_after = log_bytes(log_dir)
    assert_absent(s.all(), files_while_open, files_after, repr(logs))
    assert b"password_hash" not in files_after  # not even the field's name (the schema)
    ops = [(e.op, e.key["_id"]) for e in h.events]
    assert ops == [
        (Op.READ, 1),
        (Op.READ, 2),  # _id 10 is tenant 7's
        (Op.CREATE, 3),
        (Op.UPDATE, 3),
        (Op.UPDATE, 3),
        (Op.UPDATE, 1),
        # Without pre-images an update that does not match is a delete of its key.
        (Op.DELETE, 4),
        (Op.DELETE, 2),
        (Op.CREATE, 99),
    ]
    description = h.events[4].fields["updateDescription"]
    assert orjson.loads(description["updatedFields"]) == {"email": hashed(s.new_email)}
    first = h.events[0].after
    assert first is not None
    assert dict(first) == {
        "_id": 1,
        "tenant_id": 42,
        "name": "user 1",
        "email": hashed(s.email),
        "ssn": "***",
        "phone": "********0199",
        "notes": None,
    }
    # cdc verify reads the collection as the records hold it.
    assert {orjson.dumps(k): v for k, v in rows} == state


def latest(events: list[ChangeEvent]) -> dict[bytes, Any]:
    """The last row per key, as the sinks hold it."""
    out: dict[bytes, Any] = {}
    for event in events:
        key = orjson.dumps(event.key)
        if event.after is None:
            out.pop(key, None)
        else:
            out[key] = dict(event.after)
    return out


def test_hashed_id_keys_a_document_alike_in_snapshot_stream_and_verify(
    mongo_server: Any, tmp_path: Path
) -> None:
    s = Secrets()
    with database(mongo_server.uri) as db:
        db.accounts.insert_one({"_id": s.account, "balance": 1})
        into_next_second()
        entry = {"name": f"{db.name}.accounts", "mask": {"_id": "hash"}}
        options = {"stream_scope": scope(mongo_server), "mask_key": MASK_KEY}
        with harness(
            mongo_server.uri, tmp_path / "log", [entry], snapshot="initial", **options
        ) as h:
            h.open()
            h.collect(1)
            db.accounts.update_one({"_id": s.account}, {"$inc": {"balance": 1}})
            h.collect(2)
            db.accounts.delete_one({"_id": s.account})
            h.collect(3)
            stored = orjson.dumps(h.log.source_offsets())
            point = h.stored()["streams"]
            db.accounts.insert_one({"_id": s.account, "balance": 5})
            rows = list(MongoSourcePlugin.read_rows(h.config, db.name, "accounts"))
            h.close()
            h.open()  # resumes from the cluster time alone: the token holds the raw _id
            h.run_until(lambda: len(h.events) >= 4 and h.events[-1].after is not None)
        files = log_bytes(tmp_path / "log")
    key = {"_id": hashed(s.account)}
    assert [e.op for e in h.events[:3]] == [Op.READ, Op.UPDATE, Op.DELETE]
    assert all(e.key == key for e in h.events)
    assert h.events[0].after is not None and h.events[0].after["_id"] == key["_id"]
    assert rows == [(key, {"_id": key["_id"], "balance": 5})]
    # A resume token holds the raw _id on a real server: none is stored for these changes.
    assert [entry["resume_token"] for entry in point.values()] == [None]
    assert_absent([s.account], stored, files)


def test_move_in_and_move_out_without_pre_images(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.create_collection("docs")
        entry = {"name": f"{db.name}.docs", "where": {"tenant_id": 42}}
        with harness(mongo_server.uri, tmp_path, [entry], stream_scope=scope(mongo_server)) as h:
            h.open()
            steps = [
                (lambda: db.docs.insert_one({"_id": 1, "tenant_id": 42}), (Op.CREATE, 1)),
                (lambda: db.docs.insert_one({"_id": 2, "tenant_id": 7}), None),
                # moves in: without the document before, an update
                (
                    lambda: db.docs.update_one({"_id": 2}, {"$set": {"tenant_id": 42}}),
                    (Op.UPDATE, 2),
                ),
                # moves out: a delete
                (
                    lambda: db.docs.update_one({"_id": 1}, {"$set": {"tenant_id": 7}}),
                    (Op.DELETE, 1),
                ),
                # never matched, but it might have been: a delete of the key
                (lambda: db.docs.update_one({"_id": 1}, {"$set": {"x": 1}}), (Op.DELETE, 1)),
                (lambda: db.docs.delete_one({"_id": 2}), (Op.DELETE, 2)),
                (lambda: db.docs.insert_one({"_id": 3, "tenant_id": 42}), (Op.CREATE, 3)),
            ]
            expected = []
            for write, outcome in steps:
                write()
                if outcome is not None:
                    expected.append(outcome)
                    h.collect(len(expected))
    assert [(e.op, e.key["_id"]) for e in h.events] == expected
    moved_out = h.events[2]
    assert moved_out.before is None and moved_out.after is None


@pytest.fixture
def pre_images_server(mongo_server: Any) -> Any:
    if not is_real(mongo_server):
        pytest.skip(
            "pre-images need MongoDB 6.0+ with changeStreamPreAndPostImages "
            "(CDC_TEST_MONGO_URI); mongo-java-server records none"
        )
    with pymongo.MongoClient(mongo_server.uri) as client:
        version = client.server_info()["versionArray"]
    if version[0] < 6:
        pytest.skip(f"pre-images need MongoDB 6.0+, the server is {version}")
    return mongo_server


def test_move_in_and_move_out_with_pre_images(pre_images_server: Any, tmp_path: Path) -> None:
    server = pre_images_server
    with database(server.uri) as db:
        db.create_collection("docs", changeStreamPreAndPostImages={"enabled": True})
        entry = {"name": f"{db.name}.docs", "where": {"tenant_id": 42}}
        options = {"full_document": "required"}
        with harness(server.uri, tmp_path, [entry], **options) as h:
            h.open()
            db.docs.insert_one({"_id": 1, "tenant_id": 42, "v": 0})
            db.docs.insert_one({"_id": 2, "tenant_id": 7, "v": 0})
            db.docs.update_one({"_id": 2}, {"$set": {"tenant_id": 42}})  # moves in: create
            db.docs.update_one({"_id": 1}, {"$set": {"tenant_id": 7}})  # moves out: delete
            db.docs.update_one({"_id": 1}, {"$set": {"v": 1}})  # out, and was out: nothing
            db.docs.delete_one({"_id": 1})  # was out: nothing
            db.docs.update_one({"_id": 2}, {"$set": {"v": 2}})  # in, and was in: update
            db.docs.delete_one({"_id": 2})  # was in: delete
            events = h.collect(5)
    assert [(e.op, e.key["_id"]) for e in events] == [
        (Op.CREATE, 1),
        (Op.CREATE, 2),
        (Op.DELETE, 1),
        (Op.UPDATE, 2),
        (Op.DELETE, 2),
    ]
    assert events[1].before is None and events[2].before is not None


def test_ops_without_r_read_nothing(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.quiet.insert_many([{"_id": n} for n in range(20)])
        db.read.insert_many([{"_id": n} for n in range(3)])
        entries = [{"name": f"{db.name}.quiet", "ops": ["c", "u", "d"]}, f"{db.name}.read"]
        options = {"stream_scope": "collection", "signal_collection": f"{db.name}.signals"}
        with (
            capture_logs() as logs,
            harness(mongo_server.uri, tmp_path, entries, snapshot="initial", **options) as h,
        ):
            h.open()
            h.run_until(lambda: "last_snapshot" in h.stored())
            into_next_second()
            db.quiet.insert_one({"_id": 100})
            h.run_until(lambda: any(e.key == {"_id": 100} for e in h.events))
            with pytest.raises(ConfigError, match="never snapshotted"):
                MongoSourcePlugin.request_snapshot(h.config, "mgt", f"{db.name}.quiet", None)
            stored = h.stored()
    reads = [e for e in h.events if e.op is Op.READ]
    assert {e.source.table for e in reads} == {"read"} and len(reads) == 3
    assert stored["last_snapshot"]["rows"] == {f"{db.name}.read": 3}
    skipped = [entry for entry in logs if entry["event"] == "snapshot.tables_skipped"]
    assert skipped and skipped[0]["tables"] == [f"{db.name}.quiet"]


def test_only_collections_with_r_and_none_at_all(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.quiet.insert_many([{"_id": n} for n in range(5)])
        entry = {"name": f"{db.name}.quiet", "ops": ["c", "d"]}
        with harness(
            mongo_server.uri,
            tmp_path,
            [entry],
            snapshot="initial",
            stream_scope=scope(mongo_server),
        ) as h:
            h.open()
            h.run_until(lambda: bool(h.stored().get("streams")))
            into_next_second()
            db.quiet.insert_one({"_id": 5})
            h.run_until(lambda: any(e.key == {"_id": 5} for e in h.events))
            stored = h.stored()
    assert not any(e.op is Op.READ for e in h.events)
    assert "snapshot" not in stored and "last_snapshot" not in stored


def test_changed_filters_are_read_again_under_resnapshot(mongo_server: Any, tmp_path: Path) -> None:
    s = Secrets()
    with database(mongo_server.uri) as db:
        db.users.insert_many([user(1, s), user(2, s), user(3, s, tenant=7)])
        table = f"{db.name}.users"
        options = {"stream_scope": scope(mongo_server), "mask_key": MASK_KEY}
        with harness(mongo_server.uri, tmp_path, [table], snapshot="initial", **options) as h:
            h.open()
            h.run_until(lambda: "last_snapshot" in h.stored())
            old = {"transforms": "x", "tables": {table: "y"}, "mask_key": None}
            tx = h.log.begin()
            tx.store_offsets({OFFSET_KEY: old})
            tx.commit()
        # The next start: the pipeline file gained filters, on_transform_change: resnapshot.
        with harness(mongo_server.uri, tmp_path, [users_entry(db.name)], **options) as h:
            h.context = dataclasses.replace(h.context, resnapshot=(table,))
            h.open()
            h.run_until(
                lambda: h.stored().get("last_snapshot", {}).get("reason", "").startswith("filters")
            )
            reads = [e for e in h.events if e.op is Op.READ]
            deletes = [e.key for e in h.events if e.op is Op.DELETE]
            # A second session of the same start (a reconnect) finds the fingerprint this start
            # stores, and plans nothing again.
            tx = h.log.begin()
            tx.store_offsets({OFFSET_KEY: _fingerprint(h)})
            tx.commit()
            h.close()
            h.events.clear()
            h.open()
            h.step()
            again = h.stored()
    assert sorted(e.key["_id"] for e in reads) == [1, 2]
    assert all(e.after is not None and e.after["email"] == hashed(s.email) for e in reads)
    # _id 3 was captured before the filter; the re-read deletes it from the sinks.
    assert deletes == [{"_id": 3}]
    assert "snapshot" not in again and not any(e.op is Op.READ for e in h.events)


def _fingerprint(h: Harness) -> dict[str, Any]:
    from cdc.runtime.fingerprints import key_check

    return {
        "transforms": h.context.transforms.fingerprint(),
        "tables": {t.name: t.fingerprint() for t in h.config.tables},
        "mask_key": key_check(h.config.mask_key_bytes()),
    }


def test_rename_fields_keeps_debeziums_string_document(mongo_server: Any, tmp_path: Path) -> None:
    s = Secrets()
    with database(mongo_server.uri) as db:
        db.users.insert_one(user(1, s))
        into_next_second()
        entry = users_entry(db.name)
        options = {"stream_scope": scope(mongo_server), "mask_key": MASK_KEY}
        with harness(mongo_server.uri, tmp_path, [entry], snapshot="initial", **options) as h:
            h.open()
            h.collect(1)
            db.users.update_one({"_id": 1}, {"$set": {"name": "renamed"}})
            h.collect(2)
    chain = build_chain(
        [RenameFieldsConfig(fields={"email": "contact", "name": "full_name"})],
        "mgt",
        [f"{db.name}.users"],
    )
    out = chain.apply_all(h.events)
    values = [orjson.loads(r.value or b"null") for e in out for r in envelope.to_records(e, "mgt")]
    afters = [v["after"] for v in values if v]
    assert all(isinstance(a, str) for a in afters)  # Debezium's form: a JSON string
    documents = [orjson.loads(a) for a in afters]
    assert documents[1]["full_name"] == "renamed" and "name" not in documents[1]
    assert documents[0]["contact"] == hashed(s.email) and "email" not in documents[0]
    assert afters[0].startswith('{"_id": 1,"tenant_id": 42,"full_name": "user 1","contact": ')
    assert isinstance(out[1].after, EncodedRow)
    assert_absent(s.all(), *afters)


def test_a_row_filter_on_a_field_left_out(mongo_server: Any, tmp_path: Path) -> None:
    """The server keeps the fields the row filter reads; the source decides, then drops them."""
    with database(mongo_server.uri) as db:
        db.docs.insert_many([{"_id": 1, "tenant_id": 42, "v": 1}, {"_id": 2, "tenant_id": 7}])
        into_next_second()
        entry = {
            "name": f"{db.name}.docs",
            "columns": {"exclude": ["tenant_id"]},
            "where": {"tenant_id": 42},
        }
        options = {"stream_scope": scope(mongo_server)}
        with harness(mongo_server.uri, tmp_path, [entry], snapshot="initial", **options) as h:
            h.open()
            h.collect(1)
            db.docs.insert_one({"_id": 3, "tenant_id": 42, "v": 3})
            db.docs.insert_one({"_id": 4, "tenant_id": 7, "v": 4})
            db.docs.insert_one({"_id": 5, "tenant_id": 42, "v": 5})
            h.collect(3)
            rows = list(MongoSourcePlugin.read_rows(h.config, db.name, "docs"))
    assert [(e.op, dict(e.after or {})) for e in h.events] == [
        (Op.READ, {"_id": 1, "v": 1}),
        (Op.CREATE, {"_id": 3, "v": 3}),
        (Op.CREATE, {"_id": 5, "v": 5}),
    ]
    assert [row for _, row in rows] == [{"_id": 1, "v": 1}, {"_id": 3, "v": 3}, {"_id": 5, "v": 5}]


def _reads(h: Harness) -> dict[Any, Any]:
    return {e.key["_id"]: dict(e.after or {}) for e in h.events if e.op is Op.READ}


def test_every_re_read_applies_the_filters(mongo_server: Any, tmp_path: Path) -> None:
    """A ``cdc snapshot`` request, ``snapshot: always`` and a collection added to the file
    read documents as the stream does: filtered, left-out fields gone, masks on."""
    s = Secrets()
    with database(mongo_server.uri) as db:
        db.users.insert_many([user(1, s), user(2, s, tenant=7)])
        db.staff.insert_many([user(5, s), user(6, s, tenant=7)])
        db.create_collection("signals")
        into_next_second()
        users, staff = users_entry(db.name), users_entry(db.name) | {"name": f"{db.name}.staff"}
        options = {
            "stream_scope": "collection",
            "mask_key": MASK_KEY,
            "signal_collection": f"{db.name}.signals",
        }
        log_dir = tmp_path / "log"
        with harness(mongo_server.uri, log_dir, [users], **options) as h:
            h.open()
            h.step()
            MongoSourcePlugin.request_snapshot(h.config, "mgt", f"{db.name}.users", None)
            h.run_until(lambda: "last_snapshot" in h.stored())
            requested = _reads(h)
        with harness(mongo_server.uri, log_dir, [users], snapshot="always", **options) as h:
            h.open()
            h.run_until(lambda: h.stored()["last_snapshot"]["reason"] == "snapshot mode always")
            always = _reads(h)
        with harness(mongo_server.uri, log_dir, [users, staff], snapshot="initial", **options) as h:
            h.open()
            h.run_until(lambda: "added" in h.stored()["last_snapshot"]["reason"])
            added = _reads(h)
        files = log_bytes(log_dir)
    masked = {
        "tenant_id": 42,
        "email": hashed(s.email),
        "ssn": "***",
        "phone": "*" * (len(s.phone) - 4) + "0199",
        "notes": None,
    }
    assert requested == always == {1: {"_id": 1, "name": "user 1", **masked}}
    assert added == {5: {"_id": 5, "name": "user 5", **masked}}
    assert_absent(s.all(), files)


def test_a_route_merges_two_collections_with_unique_keys(mongo_server: Any, tmp_path: Path) -> None:
    """Two collections whose ``_id`` values collide, routed to one topic: the key field keeps
    them apart, and the rows stay Debezium's string documents, with the field."""
    with database(mongo_server.uri) as db:
        db.shard_1.insert_many([{"_id": 1, "v": "a"}, {"_id": 2, "v": "b"}])
        db.shard_2.insert_many([{"_id": 1, "v": "c"}])
        into_next_second()
        tables = [f"{db.name}.shard_1", f"{db.name}.shard_2"]
        options = {"stream_scope": scope(mongo_server)}
        with harness(mongo_server.uri, tmp_path, tables, snapshot="initial", **options) as h:
            h.open()
            h.collect(3)
            db.shard_2.update_one({"_id": 1}, {"$set": {"v": "d"}})
            h.collect(4)
        match = db.name.replace(".", r"\.") + r"\.shard_\d"
        route = RouteConfig(match=match, topic=f"{db.name}.shards")
        chain = build_chain([route], "mgt", tables)
        records = [r for e in chain.apply_all(h.events) for r in envelope.to_records(e, "mgt")]
    assert {r.topic for r in records} == {f"mgt.{db.name}.shards"}
    state: dict[bytes, Any] = {}
    for record in records:
        state[record.key or b""] = orjson.loads(orjson.loads(record.value or b"null")["after"])
    field = "__dbz__physicalTableIdentifier"
    assert sorted((orjson.loads(k)["_id"], orjson.loads(k)[field]) for k in state) == [
        (1, f"mgt.{db.name}.shard_1"),
        (1, f"mgt.{db.name}.shard_2"),
        (2, f"mgt.{db.name}.shard_1"),
    ]
    assert sorted((d["_id"], d["v"], d[field][-1]) for d in state.values()) == [
        (1, "a", "1"),
        (1, "d", "2"),
        (2, "b", "1"),
    ]
