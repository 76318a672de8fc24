"""``cdc run`` of a MongoDB pipeline whose collections are filtered and masked, into DuckDB,
Redis and the search index: documents move in and out of the row filter while it streams, and
then every sink holds exactly the matching documents with their masked values, ``cdc verify``
passes (and fails once a sink row is tampered with), and no raw value that a filter removes is
in any sink, log file, ``cdc tail`` line or the process's own log.

On mongo-java-server the pipeline uses ``stream_scope: collection`` (the only scope it delivers
events to); against a real replica set (``CDC_TEST_MONGO_URI``) the default ``auto``."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from pathlib import Path
from typing import Any

import duckdb
import pytest
import redis

from cdc.config import pipeline as config
from connectors.mongodb import MongoSourcePlugin
from sinks.duckdb import DuckDBSinkPlugin
from sinks.redis import RedisSinkConfig, RedisSinkPlugin
from sinks.search import SearchSinkConfig, SearchSinkPlugin
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.integration.mongo_kit import database, scope

pytestmark = pytest.mark.timeout(180)

MASK_KEY = "e2e-filters-mask-key-0123456789abcdef"
ENV = {"CDC_MASK_KEY": MASK_KEY}


def hashed(text: str) -> str:
    return hmac.new(MASK_KEY.encode(), text.encode(), hashlib.sha256).hexdigest()


class Secrets:
    """Raw values no filter lets out, unique to the run."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:10]
        self.password = f"PWSECRET{tag}"
        self.new_password = f"PWNEWSECRET{tag}"
        self.email = f"ada.{tag}@example.com"
        self.phone = f"+47 {tag[:4]} 0199"
        self.note = f"NOTESECRET{tag}"
        self.ssn = f"SSNSECRET{tag}"
        self.unmatched = f"OTHERTENANT{tag}"
        self.account = f"ACCTSECRET{tag}"

    def all(self) -> list[str]:
        return list(vars(self).values())


def user(n: int, s: Secrets, tenant: int = 42, **extra: Any) -> dict[str, Any]:
    return {
        "_id": n,
        "tenant_id": tenant,
        "name": f"user {n}" if tenant == 42 else s.unmatched,
        "email": s.email,
        "password_hash": s.password,
        "ssn": s.ssn,
        "phone": s.phone,
        "notes": s.note,
        **extra,
    }


def write_pipeline(tmp_path: Path, uri: str, db: str, stream_scope: str, redis_url: str) -> Path:
    path = tmp_path / "filtered.yaml"
    path.write_text(
        f"""version: 1
name: mf
source:
  type: mongodb
  dsn: {uri}
  stream_scope: {stream_scope}
  max_await_ms: 200
  tables:
    - name: {db}.users
      columns: {{exclude: [password_hash]}}
      mask: {{email: hash, ssn: redact, phone: {{type: keep_last, n: 4}}, notes: "null"}}
      where: {{tenant_id: 42, deleted: {{$ne: true}}}}
    - name: {db}.accounts
      mask: {{_id: hash}}
  mask_key: ${{CDC_MASK_KEY}}
log:
  type: embedded
sinks:
  - name: warehouse
    type: duckdb
    path: {tmp_path / "out" / "mf.duckdb"}
  - name: cache
    type: redis
    url: {redis_url}
    key_prefix: mf{int(time.time() * 1000)}
  - name: search
    type: search
    path: {tmp_path / "out" / "search"}
"""
    )
    return path


def seed(db: Any, s: Secrets) -> None:
    db.users.insert_many(
        [user(n, s) for n in range(1, 7)]
        + [user(n, s, tenant=7) for n in (7, 8, 9)]
        + [user(10, s, deleted=True)]
    )
    db.accounts.insert_many([{"_id": f"{s.account}-{n}", "balance": n} for n in (1, 2, 3)])


def change_everything(db: Any, s: Secrets) -> None:
    db.users.insert_one(user(11, s))  # in
    db.users.insert_one(user(12, s, tenant=7))  # never in
    db.users.update_one({"_id": 7}, {"$set": {"tenant_id": 42, "name": "moved in"}})
    db.users.update_one({"_id": 2}, {"$set": {"tenant_id": 7}})  # moves out
    db.users.update_one({"_id": 3}, {"$set": {"password_hash": s.new_password, "name": "u3"}})
    db.users.update_one({"_id": 10}, {"$set": {"deleted": False}})  # moves in
    db.users.update_one({"_id": 8}, {"$set": {"visits": 1}})  # stays out
    db.users.delete_one({"_id": 4})
    db.accounts.update_one({"_id": f"{s.account}-1"}, {"$inc": {"balance": 10}})
    db.accounts.delete_one({"_id": f"{s.account}-2"})
    db.accounts.insert_one({"_id": f"{s.account}-4", "balance": 4})
    db.users.insert_one(user(99, s, name="sentinel"))


def test_filtered_masked_mongodb_pipeline_into_three_sinks(
    mongo_server: Any, redis_server: Any, tmp_path: Path
) -> None:
    s = Secrets()
    with database(mongo_server.uri) as db:
        seed(db, s)
        path = write_pipeline(
            tmp_path, mongo_server.uri, db.name, scope(mongo_server), redis_server.url
        )
        pipeline = config.load(path, env=ENV)
        cache = pipeline.sink("cache")
        assert isinstance(cache, RedisSinkConfig)
        process = start_run(path, tmp_path, ENV)
        try:
            change_everything(db, s)
            users = f"{db.name}.users"
            wait_for(
                lambda: 99 in {k["_id"] for k, _ in _redis(cache, users)},
                timeout=60,
                process=process,
                log=tmp_path / "run.log",
            )
            verified = cdc("verify", str(path), "--wait", "60", "--json", cwd=tmp_path, env=ENV)
            source = {
                name: list(MongoSourcePlugin.read_rows(pipeline.source, db.name, name))  # type: ignore[arg-type]
                for name in ("users", "accounts")
            }
            tails = [
                _tail(path, tmp_path, f"mf.{db.name}.{name}") for name in ("users", "accounts")
            ]
            redis_rows = {
                name: _redis(cache, f"{db.name}.{name}") for name in ("users", "accounts")
            }
            redis_dump = _redis_dump(redis_server.url, cache.key_prefix or "")
        finally:
            assert stop(process)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
        assert verified.returncode == 0, verified.stdout + verified.stderr
        _check_sinks(pipeline, db.name, s, source, redis_rows)
        tampered = _tamper_and_verify(path, tmp_path, db.name)
    assert tampered.returncode == 1, tampered.stdout + tampered.stderr
    assert "users" in tampered.stdout
    # Every file of the run: the log's database (and -wal), the DuckDB file, the search index.
    files = b"".join(p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file())
    assert list((tmp_path / ".cdc" / "mf").glob("*")), "the embedded log's files are not there"
    run_log = (tmp_path / "run.log").read_text()
    assert "snapshot.finished" in run_log  # the process's own log is among what is checked
    _assert_absent(s.all(), files, run_log, *tails, redis_dump, verified.stdout)


def _check_sinks(
    pipeline: Any,
    db: str,
    s: Secrets,
    source: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]],
    redis_rows: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]],
) -> None:
    matching = [1, 3, 5, 6, 7, 10, 11, 99]
    accounts = sorted(hashed(f"{s.account}-{n}") for n in (1, 3, 4))
    assert sorted(k["_id"] for k, _ in source["users"]) == matching
    assert sorted(k["_id"] for k, _ in source["accounts"]) == accounts
    users = dict((k["_id"], row) for k, row in source["users"])
    assert users[3] == {
        "_id": 3,
        "tenant_id": 42,
        "name": "u3",
        "email": hashed(s.email),
        "ssn": "***",
        "phone": "*" * (len(s.phone) - 4) + "0199",
        "notes": None,
    }
    for name, expected in (("users", matching), ("accounts", accounts)):
        assert sorted(k["_id"] for k, _ in redis_rows[name]) == expected
        search = SearchSinkPlugin.read_rows(_search(pipeline), db, name)
        assert sorted(k["_id"] for k, _ in search) == expected
        ducks = DuckDBSinkPlugin.read_rows(pipeline.sink("warehouse"), db, name)
        assert sorted(k["_id"] for k, _ in ducks) == expected
    cached = {k["_id"]: row for k, row in redis_rows["users"]}
    assert cached[3] == users[3] and cached[7]["name"] == "moved in"
    # The warehouse has a column per field any document had (none for password_hash).
    ducked = {
        k["_id"]: row
        for k, row in DuckDBSinkPlugin.read_rows(pipeline.sink("warehouse"), db, "users")
    }
    assert "password_hash" not in ducked[3] and ducked[3]["email"] == hashed(s.email)
    assert {k: v for k, v in ducked[3].items() if v is not None} == {
        k: v for k, v in users[3].items() if v is not None
    }


def _search(pipeline: Any) -> SearchSinkConfig:
    search = pipeline.sink("search")
    assert isinstance(search, SearchSinkConfig)
    return search


def _redis(cache: RedisSinkConfig, table: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    schema, _, name = table.partition(".")
    return list(RedisSinkPlugin.read_rows(cache, schema, name, key_columns=["_id"]))


def _redis_dump(url: str, prefix: str) -> bytes:
    """Every key and value the run wrote to Redis."""
    client = redis.Redis.from_url(url)
    try:
        out = []
        for key in client.scan_iter(f"{prefix}*"):
            out.append(key)
            kind = client.type(key)
            if kind == b"string":
                out.append(client.get(key) or b"")
            elif kind == b"hash":
                out.extend(b"%s=%s" % (k, v) for k, v in client.hgetall(key).items())
        return b"\n".join(out)
    finally:
        client.close()


def _tail(path: Path, cwd: Path, topic: str) -> str:
    result = cdc(
        "tail", str(path), topic, "--from-beginning", "--timeout-s", "0.5", cwd=cwd, env=ENV
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), f"{topic} is empty"
    return result.stdout


def _tamper_and_verify(path: Path, cwd: Path, db: str) -> Any:
    with duckdb.connect(str(cwd / "out" / "mf.duckdb")) as warehouse:
        warehouse.execute(f"""UPDATE "{db}"."users" SET name = '"tampered"' WHERE _id = '1'""")
        assert warehouse.execute(
            f"""SELECT count(*) FROM "{db}"."users" WHERE name = '"tampered"'"""
        ).fetchone() == (1,)
    return cdc("verify", str(path), "--json", cwd=cwd, env=ENV)


def _assert_absent(secrets: list[str], *haystacks: bytes | str) -> None:
    for haystack in haystacks:
        data = haystack.encode() if isinstance(haystack, str) else haystack
        leaked = [s for s in secrets if s.encode() in data]
        assert not leaked, f"raw values leaked: {leaked}"
