"""``cdc doctor FILE [--json]`` through the CLI, against real servers: a healthy pipeline passes
every check; a misconfigured PostgreSQL (``wal_level=replica``, every slot taken, a table
without a primary key, a role without REPLICATION) and a Redis that is down are each reported
with their fix; Kafka topics that are not compacted are named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql

from tests.e2e.cli_helpers import cdc
from tests.services.ports import free_port

PASSWORD = "Doctor-S3cret-pw"
MARKS = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


def _run(server: Any, *statements: str, dbname: str = "shop") -> None:
    with psycopg.connect(server.dsn_for(dbname=dbname), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())


def _database(server: Any, role: str, replication: bool) -> str:
    """Database ``shop`` and a LOGIN role (not superuser); returns the role's DSN."""
    server.create_database("shop")
    attribute = sql.SQL("REPLICATION" if replication else "NOREPLICATION")
    statement = sql.SQL("CREATE ROLE {} LOGIN {} PASSWORD {}").format(
        sql.Identifier(role), attribute, sql.Literal(PASSWORD)
    )
    server.execute(statement)
    return str(server.dsn_for(user=role, password=PASSWORD, dbname="shop"))


def _pipeline(tmp_path: Path, name: str, tables: list[str], sinks: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{DOCTOR_DSN}}\n"
        f"  tables: [{', '.join(tables)}]\n  connect_timeout_s: 5\n"
        f"log:\n  type: embedded\n  path: log\nsinks:\n{sinks}"
    )
    return path


def _doctor(path: Path, dsn: str, *extra: str) -> tuple[int, str, str]:
    result = cdc("doctor", str(path), *extra, cwd=path.parent, env={"DOCTOR_DSN": dsn})
    return result.returncode, result.stdout, result.stderr


def _checks(path: Path, dsn: str) -> tuple[int, dict[tuple[str, str], dict[str, Any]]]:
    code, out, err = _doctor(path, dsn, "--json")
    report = orjson.loads(out)
    checks = {(c["scope"], c["name"]): c for c in report["checks"]}
    assert report["ok"] is (code == 0), err
    return code, checks


def _line(check: dict[str, Any]) -> str:
    """The text line ``cdc doctor`` prints for ``check`` (as ``--json`` gives it)."""
    line = f"{MARKS[check['level']]}  [{check['scope']}] {check['name']}: {check['detail']}"
    if check["fix"] and check["level"] != "ok":
        line += f" -> fix: {check['fix']}"
    return line


@pytest.fixture
def healthy() -> Iterator[Any]:
    from tests.services.postgres import LocalPostgres

    with LocalPostgres(settings={"max_slot_wal_keep_size": "1GB"}) as server:
        yield server


@pytest.fixture
def broken() -> Iterator[Any]:
    """``wal_level=replica`` and two slots, both taken by physical slots of other standbys."""
    from tests.services.postgres import LocalPostgres

    settings = {"wal_level": "replica", "max_replication_slots": "2"}
    with LocalPostgres(settings=settings) as server:
        server.execute("SELECT pg_create_physical_replication_slot('standby_a')")
        server.execute("SELECT pg_create_physical_replication_slot('standby_b')")
        yield server


def test_a_healthy_pipeline_passes_every_check(
    healthy: Any, redis_server: Any, tmp_path: Path
) -> None:
    dsn = _database(healthy, "cdc_ok", replication=True)
    _run(
        healthy,
        "CREATE TABLE items (id int PRIMARY KEY, name text, qty int)",
        "ALTER TABLE items OWNER TO cdc_ok",
        "GRANT CREATE ON DATABASE shop TO cdc_ok",
    )
    sinks = (
        f"  - {{name: cache, type: redis, url: '{redis_server.url}'}}\n"
        "  - {name: files, type: jsonl, path: out/files}\n"
        "  - {name: wh, type: duckdb, path: out/wh.duckdb}\n"
        "  - {name: find, type: search, path: out/index}\n"
    )
    path = _pipeline(tmp_path, "healthy", ["public.items"], sinks)
    code, out, err = _doctor(path, dsn)
    lines = out.splitlines()
    assert code == 0, out + err
    assert all(line.startswith("ok  ") for line in lines[:-1]), out
    assert lines[-1].endswith("0 failed, 0 warnings")
    for expected in (
        "[source] wal_level: logical",
        "[source] max_replication_slots: 0 of 20 in use, this pipeline needs 1",
        "[source] role cdc_ok: REPLICATION: has the REPLICATION attribute",
        "[source] table public.items: primary key: (id)",
        "[source] table public.items: replica identity: DEFAULT",
        "[source] table public.items: TOAST columns: (name) can be stored out of line",
        "[source] publication healthy_pub: does not exist yet: cdc run creates it",
        "[source] slot healthy_slot: does not exist yet",
        "[sink cache] write: SET and DEL of a probe key in db 0",
        "[sink wh] path:",
        "[log] path:",
    ):
        assert any(expected in line for line in lines), (expected, out)
    assert PASSWORD not in out + err
    assert not (tmp_path / "out").exists()  # a preflight creates nothing


def test_an_existing_slot_shows_its_state_and_retained_wal(healthy: Any, tmp_path: Path) -> None:
    dsn = _database(healthy, "cdc_ok", replication=True)
    _run(
        healthy,
        "CREATE TABLE items (id int PRIMARY KEY, qty int)",
        "GRANT SELECT ON items TO cdc_ok",
        "CREATE PUBLICATION kept_pub FOR TABLE items",
        "SELECT pg_create_logical_replication_slot('kept_slot', 'pgoutput')",
        "INSERT INTO items SELECT g, g FROM generate_series(1, 5000) g",
    )
    sinks = "  - {name: files, type: jsonl, path: out}\n"
    path = _pipeline(tmp_path, "kept", ["public.items"], sinks)
    code, checks = _checks(path, dsn)
    assert code == 0, checks
    slot = checks[("source", "slot kept_slot")]
    assert slot["ok"] and slot["detail"] == "pgoutput, inactive, wal_status reserved"
    retained = checks[("source", "slot kept_slot: retained WAL")]["detail"]
    assert " kB of WAL held since " in retained or " MB of WAL held since " in retained
    slots = checks[("source", "max_replication_slots")]["detail"]
    assert slots == "1 of 20 in use, this pipeline's among them"
    tables = checks[("source", "publication kept_pub: tables")]
    assert tables["detail"] == "holds every table of source.tables (1)"
    senders = checks[("source", "max_wal_senders")]["detail"]
    assert senders == "0 of 20 WAL senders in use"

    # A superuser's walsender streams from the slot: the role, not privileged, still sees it.
    replication = healthy.dsn_for(dbname="shop") + "?replication=database"
    repl = psycopg.connect(replication, autocommit=True)
    try:
        repl.pgconn.send_query(
            b"START_REPLICATION SLOT kept_slot LOGICAL 0/0"
            b" (proto_version '1', publication_names 'kept_pub')"
        )
        code, checks = _checks(path, dsn)
    finally:
        repl.close()  # a walsender left behind would hold the server's shutdown
    assert code == 0, checks
    detail = checks[("source", "slot kept_slot")]["detail"]
    assert detail.startswith("pgoutput, active in process "), detail
    senders = checks[("source", "max_wal_senders")]["detail"]
    assert senders == "1 of 20 WAL senders in use"


def test_a_misconfigured_server_reports_each_problem_with_its_fix(
    broken: Any, tmp_path: Path
) -> None:
    dsn = _database(broken, "cdc_bad", replication=False)
    _run(
        broken,
        "CREATE TABLE items (id int PRIMARY KEY, qty int)",
        "CREATE TABLE nokey (a int, b text)",
        "GRANT SELECT ON items, nokey TO cdc_bad",
    )
    down = f"redis://127.0.0.1:{free_port()}/0"
    sinks = f"  - {{name: cache, type: redis, url: '{down}', timeout_s: 1}}\n"
    path = _pipeline(tmp_path, "broken", ["public.items", "public.nokey"], sinks)
    code, out, err = _doctor(path, dsn)
    assert code == 1, out + err
    failures = [line for line in out.splitlines() if line.startswith("FAIL")]
    expected = {
        "[source] wal_level: replica": "set wal_level = logical in postgresql.conf",
        "[source] max_replication_slots: 2 of 2 in use": (
            "set max_replication_slots = 3 in postgresql.conf (or ALTER SYSTEM SET "
            "max_replication_slots = 3;), then restart the server; or drop an unused slot "
            "(standby_a, standby_b): SELECT pg_drop_replication_slot('standby_a');"
        ),
        "[source] role cdc_bad: REPLICATION:": (
            'a superuser must run: ALTER ROLE "cdc_bad" WITH REPLICATION;'
        ),
        "[source] table public.nokey: primary key:": (
            'ALTER TABLE "public"."nokey" REPLICA IDENTITY FULL;'
        ),
        "[source] table public.nokey: replica identity: DEFAULT and no primary key": (
            'run: ALTER TABLE "public"."nokey" REPLICA IDENTITY FULL;'
        ),
        "[source] publication broken_pub: does not exist, and role cdc_bad may not create it": (
            'a DBA must run: CREATE PUBLICATION "broken_pub" FOR TABLE "public"."items", '
            '"public"."nokey";'
        ),
        "[sink cache] reachable: redis at redis://127.0.0.1:": "start Redis at redis://",
    }
    for problem, fix in expected.items():
        found = [line for line in failures if problem in line]
        assert len(found) == 1, (problem, out)
        assert "-> fix: " in found[0] and fix in found[0].split("-> fix: ", 1)[1], found[0]
    assert len(failures) == len(expected), out
    passing = [line for line in out.splitlines() if line.startswith("ok  ")]
    assert any("[source] table public.items: primary key: (id)" in line for line in passing)
    assert PASSWORD not in out + err

    json_code, checks = _checks(path, dsn)
    assert json_code == 1
    assert [_line(c) for c in checks.values()] == out.splitlines()[:-1]
    assert not checks[("source", "wal_level")]["ok"]
    assert checks[("source", "wal_level")]["fix"].startswith("set wal_level = logical")


def test_unreachable_brokers_and_an_unwritable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    path = tmp_path / "gen.yaml"
    path.write_text(
        "version: 1\nname: gen\nsource:\n  type: generator\n  tables: [public.customers]\n"
        f"log:\n  type: kafka\n  bootstrap_servers: 127.0.0.1:{free_port()}\n"
        "  connect_timeout_s: 2\n"
        f"sinks:\n  - {{name: files, type: jsonl, path: {blocker}/out}}\n"
    )
    code, checks = _checks(path, "")
    assert code == 1
    brokers = checks[("log", "brokers")]
    assert not brokers["ok"] and "cannot reach the brokers" in brokers["detail"]
    assert "log.bootstrap_servers" in brokers["fix"]
    files = checks[("sink files", "path")]
    assert not files["ok"] and f"{blocker} is a file" in files["detail"]
    assert checks[("source", "checks")]["ok"]  # the generator has nothing to check


def test_kafka_topics_that_are_not_compacted_are_named(kafka_server: Any, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = kafka_server.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [
        NewTopic("gk.public.customers", 1, 1, config={"cleanup.policy": "delete"}),
        NewTopic("gk.public.orders", 1, 1, config={"cleanup.policy": "compact"}),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)
    path = tmp_path / "gk.yaml"
    path.write_text(
        "version: 1\nname: gk\nsource:\n  type: generator\n"
        "  tables: [public.customers, public.orders]\n"
        f"log:\n  type: kafka\n  bootstrap_servers: {bootstrap}\n  state_path: state\n"
    )
    code, checks = _checks(path, "")
    assert code == 1
    assert checks[("log", "brokers")]["ok"]
    assert checks[("log", "topic gk.public.orders: cleanup.policy")]["ok"]
    deleting = checks[("log", "topic gk.public.customers: cleanup.policy")]
    assert not deleting["ok"] and deleting["detail"].startswith("delete:")
    assert deleting["fix"] == (
        f"run: kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics "
        "--entity-name gk.public.customers --add-config cleanup.policy=compact"
    )


def test_mongodb_pre_and_post_images_are_checked(mongo_server: Any, tmp_path: Path) -> None:
    import pymongo

    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(mongo_server.uri)
    try:
        client["doctor_db"]["orders"].insert_one({"_id": 1})
    finally:
        client.close()
    path = tmp_path / "mg.yaml"
    path.write_text(
        "version: 1\nname: mg\nsource:\n  type: mongodb\n  dsn: ${DOCTOR_DSN}\n"
        "  tables: [doctor_db.orders, doctor_db.missing]\n  full_document: required\n"
        "  server_selection_timeout_ms: 5000\n"
        "log:\n  type: embedded\n  path: log\n"
    )
    code, checks = _checks(path, mongo_server.uri)
    assert code == 1
    assert checks[("source", "connect")]["ok"] and checks[("source", "replica set")]["ok"]
    assert checks[("source", "collection doctor_db.orders")]["ok"]
    images = checks[("source", "collection doctor_db.orders: pre-/post-images")]
    assert not images["ok"]
    assert images["fix"].endswith(
        'run in mongosh: db.getSiblingDB("doctor_db").runCommand({collMod: "orders", '
        "changeStreamPreAndPostImages: {enabled: true}})"
    )
    if checks[("source", "connect")]["detail"].endswith("MongoDB 4.4.0"):  # mongo-java-server
        assert images["fix"].startswith("upgrade to MongoDB 6.0 or later")
    missing = checks[("source", "collection doctor_db.missing")]
    assert not missing["ok"] and "source.tables[1]" in missing["fix"]


def test_an_invalid_file_exits_2_and_a_down_mongodb_is_one_failed_check(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: Bad-Name\nsource: {type: generator, tables: [a.b]}\n")
    assert cdc("doctor", str(bad), cwd=tmp_path).returncode == 2
    path = tmp_path / "down.yaml"
    path.write_text(
        "version: 1\nname: down\nsource:\n  type: mongodb\n  dsn: ${DOCTOR_DSN}\n"
        "  tables: [db.c]\n  server_selection_timeout_ms: 500\n"
    )
    dsn = f"mongodb://cdc:{PASSWORD}@127.0.0.1:{free_port()}/?directConnection=true"
    code, out, err = _doctor(path, dsn)
    assert code == 1
    lines = [line for line in out.splitlines() if "[source]" in line]
    assert len(lines) == 1 and lines[0].startswith("FAIL  [source] connect: "), out
    assert "unreachable" in lines[0] and PASSWORD not in out + err
