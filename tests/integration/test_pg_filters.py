"""``source.tables`` filters on a real PostgreSQL, through the snapshotting source and the real
source task into a real embedded log: what leaves the database, in the snapshot and the stream.

* Excluded and masked values never reach a byte of the log (the SQLite files are read whole),
  on every version: from 15 the publication's column list keeps excluded columns on the server,
  on 14, or for a ``REPLICA IDENTITY FULL`` table whose identity needs them, the source drops
  them from each tuple.
* A row filter (15+) moves rows in (``c``) and out (``d``) of the topic as PostgreSQL's
  row-filter semantics define; one on a column outside the replica identity is refused before
  it can break the application's ``UPDATE``s; on 14 a row filter is a start error.
* Key columns: excluded or masked other than by hash is refused; a hashed key stays one key
  through snapshot, stream and TOAST fill.
* Transforms run on snapshot rows too: a route merges two tables, with unique keys.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from cdc.contracts.errors import SourceMisconfigured
from cdc.runtime.schemas import SchemaCatalog
from cdc.transforms.masks import hash_text, keep_last
from connectors.postgres.snapshot.table_rows import table_rows
from tests.integration.snapshot_kit import PIPELINE, Pipeline, execute, pipeline

KEY = "filters-test-key-0123456789"
SECRETS = ("pw-secret-", "ssn-raw-", "note-raw-", "audit-secret-", "@mail.test", "555-01")


def version(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.info.server_version)


def rows(dsn: str, statement: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute(statement).fetchall()]  # type: ignore[arg-type]


def log_bytes(log_dir: Path) -> bytes:
    """Every byte of the embedded log's files (the database, its WAL and shared memory)."""
    return b"".join(p.read_bytes() for p in sorted(log_dir.rglob("*")) if p.is_file())


def wait_matches(p: Pipeline, table: str, expected: Callable[[], dict[Any, Any]]) -> None:
    last: dict[str, Any] = {}

    def same() -> bool:
        last["topic"], last["want"] = p.topic_state(table), expected()
        return bool(last["topic"] == last["want"])

    p.wait(same, 60, lambda: f"{table}: topic {last.get('topic')} == {last.get('want')}")


def held(dsn: str) -> dict[str, Any]:
    """What the pipeline's publication holds per table: column list and row filter (15+)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT c.relname::text, r.prattrs IS NOT NULL, pg_get_expr(r.prqual, r.prrelid)"
            " FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid"
            " JOIN pg_class c ON c.oid = r.prrelid WHERE p.pubname = %s",
            (f"{PIPELINE}_pub",),
        ).fetchall()
    return {name: (listed, where) for name, listed, where in found}


def failure(p: Pipeline) -> str:
    """The error that stopped the pipeline's source task (waited for)."""
    p.wait(lambda: p.error is not None, timeout_s=60)
    return str(p.error)


# -- columns and masks ---------------------------------------------------------------------


def _users_expected(dsn: str) -> dict[Any, Any]:
    out = {}
    for row in rows(dsn, "SELECT to_jsonb(u) FROM users u"):
        row.pop("password_hash")
        row["email"] = hash_text(KEY.encode(), row["email"])
        row["ssn"] = None if row["ssn"] is None else "***"
        row["phone"] = keep_last(row["phone"], 4)
        row["notes"] = None
        out[row["id"]] = row
    return out


def _audit_expected(dsn: str) -> dict[Any, Any]:
    found = rows(dsn, "SELECT to_jsonb(a) - 'secret' FROM audit a")
    return {row["id"]: row for row in found}


@pytest.mark.pgcore
def test_excluded_and_masked_values_never_reach_the_log(pg_db: str, tmp_path: Path) -> None:
    execute(
        pg_db,
        "CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL, password_hash text,"
        " ssn text, phone text, notes text, bio text)",
        "INSERT INTO users SELECT g, 'user' || g || '@mail.test', 'pw-secret-' || g,"
        " 'ssn-raw-' || g, '555-01' || lpad(g::text, 2, '0'), 'note-raw-' || g,"
        " repeat('bio ', 2000) || g FROM generate_series(1, 20) g",
        # A REPLICA IDENTITY FULL table: its identity needs every column, so the column list
        # stays off the publication and the source drops the excluded column itself.
        "CREATE TABLE audit (id int PRIMARY KEY, actor text, secret text)",
        "ALTER TABLE audit REPLICA IDENTITY FULL",
        "INSERT INTO audit SELECT g, 'actor' || g, 'audit-secret-' || g"
        " FROM generate_series(1, 5) g",
    )
    users = {
        "name": "public.users",
        "columns": {"exclude": ["password_hash"]},
        "mask": {"email": "hash", "ssn": "redact", "phone": {"type": "keep_last", "n": 4}},
    }
    users["mask"]["notes"] = None  # YAML's null: the null mask
    audit = {"name": "public.audit", "columns": {"exclude": ["secret"]}}
    log_dir = tmp_path / "log"
    with pipeline(pg_db, log_dir, [users, audit], mask_key=KEY, snapshot="initial") as p:
        p.start()
        p.wait(p.snapshot_done)
        wait_matches(p, "public.users", lambda: _users_expected(pg_db))
        execute(
            pg_db,
            "INSERT INTO users VALUES (21, 'new@mail.test', 'pw-secret-21', 'ssn-raw-21',"
            " '555-0121', 'note-raw-21', 'short')",
            # bio stays TOASTed and unchanged: filled from the log's (masked) image.
            "UPDATE users SET email = 'changed3@mail.test' WHERE id = 3",
            "UPDATE users SET password_hash = 'pw-secret-new4' WHERE id = 4",
            "DELETE FROM users WHERE id = 5",
            "UPDATE audit SET secret = 'audit-secret-new2', actor = 'changed' WHERE id = 2",
            "DELETE FROM audit WHERE id = 3",
        )
        wait_matches(p, "public.users", lambda: _users_expected(pg_db))
        wait_matches(p, "public.audit", lambda: _audit_expected(pg_db))
        schema = SchemaCatalog(p.log, PIPELINE, wait_s=0).get("public", "users")
        assert schema is not None
        columns = {c.name: c.type for c in schema.columns}
        assert "password_hash" not in columns
        assert columns["email"] == columns["ssn"] == columns["notes"] == "text"
        # 15+: the column list keeps password_hash on the server; never for the FULL table.
        modern = version(pg_db) >= 150000
        listed = {name: state[0] for name, state in held(pg_db).items()} if modern else {}
        blob = log_bytes(log_dir)
    for secret in SECRETS:
        assert secret.encode() not in blob, secret
    assert listed == ({"users": True, "audit": False} if modern else {})


# -- row filters ---------------------------------------------------------------------------


ACCOUNTS = {"name": "public.accounts", "where": "tenant = 42 AND NOT deleted"}
EVEN = {"name": "public.shards", "where": "id % 2 = 0"}  # on the key: DEFAULT identity suffices


def _matching(dsn: str, table: str, where: str) -> dict[Any, Any]:
    found = rows(dsn, f"SELECT to_jsonb(t) FROM {table} t WHERE {where}")  # test-only SQL
    return {row["id"]: row for row in found}


@pytest.mark.pgcore
def test_a_row_filter_moves_rows_in_and_out(pg_db: str, tmp_path: Path) -> None:
    execute(
        pg_db,
        "CREATE TABLE accounts (id int PRIMARY KEY, tenant int, deleted bool NOT NULL, name text)",
        "ALTER TABLE accounts REPLICA IDENTITY FULL",  # the filter's columns are in it
        "INSERT INTO accounts SELECT g, CASE WHEN g % 3 = 0 THEN 7 ELSE 42 END, false,"
        " 'name' || g FROM generate_series(1, 30) g",
        "CREATE TABLE shards (id int PRIMARY KEY, region text)",
        "INSERT INTO shards SELECT g, 'r' || g FROM generate_series(1, 10) g",
    )
    with pipeline(pg_db, tmp_path / "log", [ACCOUNTS, EVEN], snapshot="initial") as p:
        p.start()
        if version(pg_db) < 150000:
            assert "needs PostgreSQL 15" in failure(p)
            return
        p.wait(p.snapshot_done)
        accounts = lambda: _matching(pg_db, "accounts", ACCOUNTS["where"])  # noqa: E731
        wait_matches(p, "public.accounts", accounts)
        wait_matches(p, "public.shards", lambda: _matching(pg_db, "shards", EVEN["where"]))
        before = len(p.topic_records("public.accounts"))
        execute(
            pg_db,
            "UPDATE accounts SET tenant = 42 WHERE id = 3",  # in
            "UPDATE accounts SET deleted = true WHERE id = 4",  # out
            "UPDATE accounts SET name = 'outside' WHERE id = 6",  # neither: nothing
            "UPDATE accounts SET name = 'inside' WHERE id = 7",
            "DELETE FROM accounts WHERE id = 9",  # outside: nothing
            "DELETE FROM accounts WHERE id = 10",
            "INSERT INTO accounts VALUES (31, 7, false, 'outside'), (32, 42, false, 'in')",
            "UPDATE shards SET id = 12 WHERE id = 1",  # a key change into the filter
            "UPDATE shards SET id = 13 WHERE id = 2",  # and out of it
        )
        wait_matches(p, "public.accounts", accounts)
        wait_matches(p, "public.shards", lambda: _matching(pg_db, "shards", EVEN["where"]))
        ops = [(r["key"]["id"], r["op"]) for r in p.topic_records("public.accounts")[before:]]
        assert ops == [(3, "c"), (4, "d"), (4, None), (7, "u"), (10, "d"), (10, None), (32, "c")]
    config = p.config
    verified = {k["id"]: row for k, row in table_rows(config, "public", "accounts")}
    assert verified == _matching(pg_db, "accounts", ACCOUNTS["where"])


def test_a_row_filter_outside_the_replica_identity_is_refused_before_it_applies(
    pg_db: str, tmp_path: Path
) -> None:
    execute(
        pg_db,
        "CREATE TABLE orders (id int PRIMARY KEY, region text)",
        "INSERT INTO orders VALUES (1, 'eu')",
    )
    entry = {"name": "public.orders", "where": "region = 'eu'"}
    with pipeline(pg_db, tmp_path / "log", [entry], snapshot="initial") as p:
        p.start()
        message = failure(p)
        if version(pg_db) < 150000:
            assert "needs PostgreSQL 15" in message
            return
        # The filter never took effect (the publication was not even created): the
        # application's UPDATEs still work.
        assert held(pg_db) == {}
        execute(pg_db, "UPDATE orders SET region = 'us' WHERE id = 1")
    assert "region" in message and "outside its replica identity" in message
    assert 'ALTER TABLE "public"."orders" REPLICA IDENTITY FULL' in message
    assert isinstance(p.error, SourceMisconfigured)  # cdc run exits 2 (a config error)


def test_a_row_filter_the_server_refuses_says_why(pg_db: str, tmp_path: Path) -> None:
    if version(pg_db) < 150000:
        pytest.skip("row filters are a start error before PostgreSQL 15 (tested above)")
    execute(pg_db, "CREATE TABLE orders (id int PRIMARY KEY, amount int)")
    entry = {"name": "public.orders", "where": "amount > random() * 10"}
    with pipeline(pg_db, tmp_path / "log", [entry], snapshot="initial") as p:
        p.start()
        message = failure(p)
    assert "mutable functions are not allowed" in message, message
    assert "immutable functions only" in message


# -- key columns ---------------------------------------------------------------------------


def test_key_columns_can_only_be_hashed(pg_db: str, tmp_path: Path) -> None:
    execute(
        pg_db,
        "CREATE TABLE people (email text PRIMARY KEY, name text, bio text)",
        "INSERT INTO people SELECT 'p' || g || '@mail.test', 'n' || g, repeat('x', 5000) || g"
        " FROM generate_series(1, 5) g",
    )
    for entry, problem in (
        ({"name": "public.people", "columns": {"exclude": ["email"]}}, "leaves out key"),
        ({"name": "public.people", "mask": {"email": "redact"}}, "may only be hashed"),
    ):
        with pipeline(pg_db, tmp_path / problem, [entry], snapshot="initial") as p:
            p.start()
            assert problem in failure(p)
    hashed = {"name": "public.people", "mask": {"email": "hash"}}
    log_dir = tmp_path / "hashed"
    with pipeline(pg_db, log_dir, [hashed], mask_key=KEY, snapshot="initial") as p:
        p.start()
        p.wait(p.snapshot_done)
        # bio is TOASTed and unchanged: its value is found in the log under the hashed key.
        execute(pg_db, "UPDATE people SET name = 'renamed' WHERE email = 'p2@mail.test'")

        def expected() -> dict[Any, Any]:
            found = rows(pg_db, "SELECT to_jsonb(p) FROM people p")
            return {(h := hash_text(KEY.encode(), r["email"])): {**r, "email": h} for r in found}

        wait_matches(p, "public.people", expected)
        records = p.topic_records("public.people")
        assert not [r for r in records if r["op"] and "toast_fallback" in r["source"]]
        blob = log_bytes(log_dir)
    assert b"@mail.test" not in blob


# -- transforms on the snapshot's rows -----------------------------------------------------


ROUTE = {"type": "route", "match": r"public\.orders_\d+", "topic": "public.orders"}


def test_a_route_merges_snapshot_and_stream_rows_with_unique_keys(
    pg_db: str, tmp_path: Path
) -> None:
    execute(
        pg_db,
        "CREATE TABLE orders_1 (id int PRIMARY KEY, amount int)",
        "CREATE TABLE orders_2 (id int PRIMARY KEY, amount int)",
        "INSERT INTO orders_1 SELECT g, g FROM generate_series(1, 3) g",
        "INSERT INTO orders_2 SELECT g, 10 * g FROM generate_series(1, 2) g",
    )
    tables = ["public.orders_1", "public.orders_2"]
    with pipeline(
        pg_db,
        tmp_path / "log",
        tables,
        transforms=[ROUTE],
        bad_records="dead_letter",
        snapshot="initial",
    ) as p:
        p.start()
        p.wait(p.snapshot_done)
        execute(
            pg_db,
            "INSERT INTO orders_2 VALUES (3, 30)",
            "UPDATE orders_1 SET amount = 100 WHERE id = 1",
            "DELETE FROM orders_2 WHERE id = 1",
            "TRUNCATE orders_1",  # would empty orders_2's rows too: a dead letter instead
        )

        def merged() -> dict[Any, Any]:
            found: dict[Any, Any] = {}
            for n in (1, 2):
                table = f"{PIPELINE}.public.orders_{n}"
                for row in rows(pg_db, f"SELECT to_jsonb(t) FROM orders_{n} t"):  # test SQL
                    key = {"id": row["id"], "__dbz__physicalTableIdentifier": table}
                    found[orjson.dumps(key)] = {**row, "__dbz__physicalTableIdentifier": table}
            return found

        p.wait(lambda: bool(p.topic_records(f"{PIPELINE}.__dlq", raw_topic=True)))
        # orders_1's rows stay: its truncate did not reach the merged topic.
        want = merged()
        first = f"{PIPELINE}.public.orders_1"
        for i in (1, 2, 3):
            key = {"id": i, "__dbz__physicalTableIdentifier": first}
            want[orjson.dumps(key)] = {**key, "amount": 100 if i == 1 else i}
        wait_matches(p, "public.orders", lambda: want)
        (letter,) = p.topic_records(f"{PIPELINE}.__dlq", raw_topic=True)
        assert "TRUNCATE of public.orders_1" in letter["reason"]
        assert f"{PIPELINE}.public.orders_1" not in {t.name for t in p.log.topics()}


# -- cdc doctor ----------------------------------------------------------------------------


def test_doctor_names_what_a_start_would_refuse(pg_db: str) -> None:
    from connectors.postgres import PostgresSourceConfig
    from connectors.postgres.doctor.server import doctor

    execute(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY, tenant int, name text)",
        "CREATE TABLE f (id int PRIMARY KEY, tenant int)",
        "ALTER TABLE f REPLICA IDENTITY FULL",
    )
    tables = [
        {"name": "public.t", "where": "tenant = 1"},  # outside the identity
        {"name": "public.f", "where": "tenant = 1 AND id > 0"},  # FULL: fine
        {"name": "public.t", "where": "id > random()"},
        {"name": "public.f", "columns": {"exclude": ["id"]}},
    ]
    reports = {}
    for n, entry in enumerate(tables):
        config = PostgresSourceConfig.model_validate(
            {"type": "postgres", "dsn": pg_db, "tables": [entry]}
        )
        checks = doctor(config, f"doc{n}")
        reports[n] = {c.name.rsplit(": ", 1)[-1]: c for c in checks if c.name.startswith("table")}
    if version(pg_db) < 150000:
        assert not reports[0]["row filter"].ok
        assert "cannot filter" in reports[0]["row filter"].detail
        return
    assert not reports[0]["row filter"].ok and "tenant" in reports[0]["row filter"].detail
    assert "REPLICA IDENTITY FULL" in (reports[0]["row filter"].fix or "")
    assert reports[1]["row filter"].ok and "id, tenant" in reports[1]["row filter"].detail
    assert not reports[2]["row filter"].ok and "random" in reports[2]["row filter"].detail
    assert not reports[3]["key columns and filters"].ok
    # Nothing was created: no publication, no view left behind.
    assert rows(pg_db, "SELECT to_jsonb(p) FROM pg_publication p") == []


def test_a_routed_tables_unchanged_toast_value_is_filled_from_the_log(
    pg_db: str, tmp_path: Path
) -> None:
    execute(
        pg_db,
        "CREATE TABLE orders_1 (id int PRIMARY KEY, amount int, note text)",
        "CREATE TABLE orders_2 (id int PRIMARY KEY, amount int, note text)",
        "INSERT INTO orders_1 VALUES (1, 1, repeat('toasted ', 4000))",
        "INSERT INTO orders_2 VALUES (1, 2, repeat('other ', 4000))",
    )
    tables = ["public.orders_1", "public.orders_2"]
    with pipeline(pg_db, tmp_path / "log", tables, transforms=[ROUTE], snapshot="initial") as p:
        p.start()
        p.wait(p.snapshot_done)
        execute(pg_db, "UPDATE orders_1 SET amount = 10 WHERE id = 1")  # note stays TOASTed
        p.wait(lambda: any(r["op"] == "u" for r in p.topic_records("public.orders")))
        (update,) = [r for r in p.topic_records("public.orders") if r["op"] == "u"]
    assert update["after"]["note"] == "toasted " * 4000
    assert update["after"]["amount"] == 10
    assert "toast_fallback" not in update["source"]  # found in the merged topic, not re-read
