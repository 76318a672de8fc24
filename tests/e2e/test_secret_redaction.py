"""Secrets never reach output, logs or stored state, whatever form the DSN or URL takes.

Real PostgreSQL (scram over TCP) and a real Redis with ``requirepass``: a role and a Redis
password with every character that needs quoting, given as libpq and redis-py accept them
(query parameter, percent-encoded key, userinfo, keyword/value, multi-host). Every command a user
runs (``validate``, ``run``, ``status``, ``topics``, ``verify``, ``snapshot``, ``tail``, ``drop``)
is run against a working pipeline and against wrong passwords and unreachable servers; the
secrets must appear nowhere in their output, in ``cdc run``'s log or under ``.cdc``.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
import redis
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.services.ports import LOOPBACK, free_port
from tests.services.redis import LocalRedis

PIPE = "sec"


def _secret(head: str, tail: str) -> str:
    """A password with a unique head and tail (searched for in every output) around every
    character that some form must quote, percent-encode or escape."""
    return f"{head}{uuid.uuid4().hex[:10]} p'a\\s@s&w=o%r/d#?;x:y{tail}{uuid.uuid4().hex[:10]}"


def _markers(secret: str) -> list[str]:
    # Alphanumeric runs survive percent-encoding and escaping: any leaked form contains them.
    return [secret.split(" ")[0], secret.rsplit(":y", 1)[1]]


class _Pg:
    def __init__(self, admin_dsn: str, role: str, password: str) -> None:
        params = conninfo_to_dict(admin_dsn)
        self.admin_dsn = admin_dsn
        self.host, self.port, self.db = params["host"], int(str(params["port"])), params["dbname"]
        self.role, self.password = role, password

    def dsn(self, form: str, password: str | None = None, port: int | None = None) -> str:
        pw, at = password or self.password, port or self.port
        encoded = quote(pw, safe="")
        base = f"{self.host}:{at}/{self.db}"
        if form == "query":
            return f"postgresql://{self.role}@{base}?password={encoded}"
        if form == "encoded_key":
            return f"postgresql://{self.role}@{base}?sslmode=disable&pass%77ord={encoded}"
        if form == "userinfo":
            return f"postgresql://{self.role}:{encoded}@{base}"
        if form == "multihost":
            closed = free_port()
            return (
                f"postgres://{self.role}@{self.host}:{closed},{self.host}:{at}/{self.db}"
                f"?target_session_attrs=any&password={encoded}"
            )
        escaped = pw.replace("\\", "\\\\").replace("'", "\\'")
        return f"host={self.host} port={at} dbname={self.db} user={self.role} password='{escaped}'"


PG_FORMS = ["query", "encoded_key", "userinfo", "multihost", "keyword"]
REDIS_FORMS = ["query", "encoded_key", "userinfo"]


@pytest.fixture
def pg(pg_db: str) -> Iterator[_Pg]:
    """A superuser role of the test's own, whose password needs quoting in every form."""
    role, password = f"cdc_sec_{uuid.uuid4().hex[:8]}", _secret("Zq", "Qz")
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO orders SELECT g, 'n' || g FROM generate_series(1, 3) g")
    try:
        yield _Pg(pg_db, role, password)
    finally:
        with psycopg.connect(pg_db, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


class _SecureRedis(LocalRedis):
    """``redis-server`` with ``requirepass``; ``url`` carries the password."""

    def __init__(self, password: str) -> None:
        # A fixed port and the append-only file: a restart keeps the URL and the data.
        super().__init__(port=free_port(), appendonly=True)
        self.password = password

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0?password={quote(self.password, safe='')}"

    def form(self, form: str, password: str | None = None, port: int | None = None) -> str:
        encoded = quote(password or self.password, safe="")
        base = f"{LOOPBACK}:{port or self.port}"
        if form == "query":
            return f"redis://{base}/0?password={encoded}"
        if form == "encoded_key":
            return f"redis://{base}/0?socket_keepalive=true&pass%77ord={encoded}"
        return f"redis://default:{encoded}@{base}/0"

    def _config(self) -> str:
        escaped = self.password.replace("\\", "\\\\").replace('"', '\\"')
        return super()._config() + f'requirepass "{escaped}"\n'


@pytest.fixture(scope="module")
def secure_redis_server() -> Iterator[_SecureRedis]:
    server = _SecureRedis(_secret("Rd", "Dr"))
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def secure_redis(secure_redis_server: _SecureRedis) -> _SecureRedis:
    """The module's server, emptied: each test's sink starts without stored offsets."""
    with redis.Redis.from_url(secure_redis_server.url) as client:
        client.flushdb()
    return secure_redis_server


def _pipeline(tmp_path: Path, sinks: list[str]) -> Path:
    path = tmp_path / "sec.yaml"
    sink_text = "".join(
        f"  - name: {name}\n    type: redis\n    url: ${{{name.upper()}_URL}}\n    timeout_s: 2\n"
        for name in sinks
    )
    path.write_text(
        f"version: 1\nname: {PIPE}\nsource:\n  type: postgres\n  dsn: ${{PG_DSN}}\n"
        "  tables: [public.orders]\n  connect_timeout_s: 3\n  status_interval_s: 1\n"
        f"sinks:\n{sink_text}"
    )
    return path


class _Outputs:
    """Everything a user could see or a file could keep, checked for the secrets at the end."""

    def __init__(self, tmp_path: Path, env: dict[str, str], pipeline: Path) -> None:
        self.tmp_path, self.env, self.pipeline = tmp_path, env, pipeline
        self.texts: dict[str, str] = {}

    def run(self, *args: str, codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        result = cdc(args[0], str(self.pipeline), *args[1:], cwd=self.tmp_path, env=self.env)
        self.texts[" ".join(args)] = result.stdout + result.stderr
        assert result.returncode in codes, f"{args}: {result.returncode}\n{result.stderr}"
        return result

    def assert_no_secret(self, *secrets: str) -> None:
        self.texts["run.log"] = _read(self.tmp_path / "run.log")
        assert self.texts["run.log"], "cdc run logged nothing"
        stored = [p for p in (self.tmp_path / ".cdc").rglob("*") if p.is_file()]
        for secret in secrets:
            for marker in _markers(secret):
                for name, text in self.texts.items():
                    assert marker not in text, f"{marker} in the output of {name}:\n{text}"
                for path in stored:
                    assert marker.encode() not in path.read_bytes(), f"{marker} in {path}"


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _wait_logged(
    tmp_path: Path, process: subprocess.Popen[str], found: Callable[[str], bool]
) -> None:
    """Until the run's log shows ``found`` (or the run has ended: its log is complete)."""
    log = tmp_path / "run.log"
    wait_for(lambda: found(_read(log)) or process.poll() is not None, timeout=90, log=log)
    assert found(_read(log)), _read(log)[-4000:]


def _stop(process: subprocess.Popen[str]) -> int:
    return process.returncode if process.poll() is not None else stop(process, timeout=30)[0]


def _walsender(admin_dsn: str) -> int | None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (f"{PIPE}_slot",)
        ).fetchone()
    return None if row is None else row[0]


def _outages(pg: _Pg, secure_redis: _SecureRedis, tmp_path: Path, run: Any, keys: Any) -> None:
    """Break the replication connection and restart Redis: both are retried, and logged."""
    log = tmp_path / "run.log"
    wait_for(lambda: _walsender(pg.admin_dsn) is not None, timeout=60, process=run, log=log)
    with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (_walsender(pg.admin_dsn),))
    wait_for(lambda: "lost the replication" in _read(log), timeout=60, process=run, log=log)
    secure_redis.stop()
    try:
        # The sink meets the outage when it has something to write.
        with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO orders VALUES (4, 'during the outage')")
        wait_for(lambda: "is unreachable" in _read(log), timeout=60, process=run, log=log)
    finally:
        secure_redis.start()
    wait_for(lambda: keys() == 4, timeout=90, process=run, log=log)


@pytest.mark.parametrize(
    ("pg_form", "redis_form"),
    [(form, REDIS_FORMS[i % len(REDIS_FORMS)]) for i, form in enumerate(PG_FORMS)],
)
def test_a_working_pipeline_shows_no_secret(
    pg: _Pg, secure_redis: _SecureRedis, tmp_path: Path, pg_form: str, redis_form: str
) -> None:
    dsn, url = pg.dsn(pg_form), secure_redis.form(redis_form)
    assert conninfo_to_dict(dsn)["password"] == pg.password  # libpq reads the form as meant
    with psycopg.connect(dsn, connect_timeout=5):
        pass
    client = redis.Redis.from_url(url)
    assert client.ping()
    env = {"PG_DSN": dsn, "CACHE_URL": url}
    out = _Outputs(tmp_path, env, _pipeline(tmp_path, ["cache"]))
    out.run("validate")
    run = start_run(out.pipeline, tmp_path, env)

    def keys() -> int:
        return len(client.keys(f"{PIPE}:public.orders:*"))

    try:
        wait_for(lambda: keys() == 3, timeout=90, process=run, log=tmp_path / "run.log")
        _outages(pg, secure_redis, tmp_path, run, keys)
        out.run("status")
        out.run("status", "--json")
        out.run("topics", "--json")
        out.run("verify")
        out.run("verify", "--json")
        out.run("snapshot", "--table", "public.orders", "--wait", "--timeout-s", "90")
        out.run("tail", f"{PIPE}.public.orders", "--from-beginning", "--timeout-s", "0.5")
    finally:
        assert _stop(run) == 0, _read(tmp_path / "run.log")[-4000:]
        client.close()
    out.run("drop", "--yes")
    out.assert_no_secret(pg.password, secure_redis.password)


@pytest.mark.parametrize("pg_form", PG_FORMS)
def test_a_wrong_postgres_password_shows_no_secret(
    pg: _Pg, secure_redis: _SecureRedis, tmp_path: Path, pg_form: str
) -> None:
    wrong = _secret("Wp", "Pw")
    env = {
        "PG_DSN": pg.dsn(pg_form, password=wrong),
        "CACHE_URL": secure_redis.form("query", port=free_port()),  # nothing listens there
    }
    out = _Outputs(tmp_path, env, _pipeline(tmp_path, ["cache"]))
    out.run("validate")
    run = start_run(out.pipeline, tmp_path, env)
    try:
        _wait_logged(tmp_path, run, lambda log: "password authentication failed" in log)
    finally:
        _stop(run)
    for args in (("snapshot", "--table", "public.orders"), ("drop", "--yes")):
        result = out.run(*args, codes=(1,))
        assert "password authentication failed" in result.stderr
    out.run("verify", codes=(1,))
    out.run("status", "--json")
    out.assert_no_secret(wrong, pg.password, secure_redis.password)


def test_wrong_and_unreachable_redis_show_no_secret(
    pg: _Pg, secure_redis: _SecureRedis, tmp_path: Path
) -> None:
    wrong = _secret("Wr", "Rw")
    env = {
        "PG_DSN": pg.dsn("query"),
        "CACHE_URL": secure_redis.form("query", password=wrong),
        "GONE_URL": secure_redis.form("encoded_key", port=free_port()),
    }
    out = _Outputs(tmp_path, env, _pipeline(tmp_path, ["cache", "gone"]))
    out.run("validate")
    run = start_run(out.pipeline, tmp_path, env)
    try:
        _wait_logged(tmp_path, run, lambda log: "refused the credentials" in log)
        out.run("status", "--json")
        out.run("verify", codes=(1,))
    finally:
        _stop(run)
    # A second run without the failing sink, so the unreachable one is retried and logged.
    run = start_run(out.pipeline, tmp_path, env, "--role", "sinks", "--sink", "gone")
    try:
        _wait_logged(tmp_path, run, lambda log: "is unreachable" in log)
    finally:
        _stop(run)
    out.run("drop", "--yes")
    out.assert_no_secret(wrong, pg.password, secure_redis.password)


@pytest.mark.parametrize("pg_form", ["query", "keyword"])
def test_an_unreachable_postgres_shows_no_secret(
    pg: _Pg, secure_redis: _SecureRedis, tmp_path: Path, pg_form: str
) -> None:
    env: dict[str, Any] = {
        "PG_DSN": pg.dsn(pg_form, port=free_port()),
        "CACHE_URL": secure_redis.form("userinfo"),
    }
    out = _Outputs(tmp_path, env, _pipeline(tmp_path, ["cache"]))
    run = start_run(out.pipeline, tmp_path, env)
    try:
        _wait_logged(tmp_path, run, lambda log: "unreachable" in log)
    finally:
        _stop(run)
    out.run("verify", codes=(1,))
    out.run("snapshot", "--table", "public.orders", codes=(1,))
    out.assert_no_secret(pg.password, secure_redis.password)


def test_unreachable_mongodb_and_kafka_show_no_secret(tmp_path: Path) -> None:
    """No server needed: a MongoDB URI with a password in userinfo and a session token in its
    options, and a Kafka log whose SASL password is in ``properties``, both unreachable."""
    password, token, sasl = _secret("Mp", "Pm"), _secret("Mt", "Tm"), _secret("Ks", "Sk")
    uri = (
        f"mongodb://u:{quote(password, safe='')}@{LOOPBACK}:{free_port()}/?authSource=admin"
        f"&authMechanismProperties=AWS_SESSION_TOKEN:{quote(token, safe='')}"
    )
    pipeline = tmp_path / "sec.yaml"
    pipeline.write_text(
        f"version: 1\nname: {PIPE}\nsource:\n  type: mongodb\n  dsn: ${{M_DSN}}\n"
        "  tables: [shop.orders]\n  server_selection_timeout_ms: 1000\n"
    )
    env = {"M_DSN": uri, "SASL": sasl}
    out = _Outputs(tmp_path, env, pipeline)
    run = start_run(pipeline, tmp_path, env)
    try:
        _wait_logged(tmp_path, run, lambda log: "is unreachable" in log)
    finally:
        _stop(run)
    pipeline.write_text(
        pipeline.read_text()
        + f"log:\n  type: kafka\n  bootstrap_servers: {LOOPBACK}:{free_port()}\n"
        "  connect_timeout_s: 2\n  properties:\n    security.protocol: SASL_PLAINTEXT\n"
        "    sasl.mechanism: PLAIN\n    sasl.username: u\n    sasl.password: ${SASL}\n"
    )
    out.run("validate")
    out.run("status", "--json", codes=(1,))
    out.run("topics", codes=(1,))
    out.assert_no_secret(password, token, sasl)
