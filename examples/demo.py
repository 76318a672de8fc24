"""The demo: a throwaway PostgreSQL and Redis, a shop schema under a live workload, and a
pipeline on the embedded log into DuckDB, Redis and a search index; then status, verify, a
search and a warehouse query. Run it with ``make demo``; it cleans up after itself.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import orjson
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the throwaway servers come from the test harness

from tests.services.postgres import LocalPostgres  # noqa: E402
from tests.services.redis import LocalRedis  # noqa: E402

WORK = ROOT / "demo-out"
PIPELINE = """\
version: 1
name: shop
source:
  type: postgres
  dsn: ${SHOP_PG_DSN}
  tables: [public.customers, public.orders]
  snapshot: initial
log:
  type: embedded
  path: .cdc/shop
sinks:
  - name: warehouse
    type: duckdb
    path: out/shop.duckdb
  - name: cache
    type: redis
    url: ${SHOP_REDIS_URL}
    tables: [public.customers]
  - name: search
    type: search
    path: out/search
    tables: [public.customers]
"""
SCHEMA = """
CREATE TABLE customers (
  id bigserial PRIMARY KEY, name text NOT NULL, email text, balance numeric(12,2),
  tags text[], profile jsonb, updated_at timestamptz DEFAULT now());
CREATE TABLE orders (
  id bigserial PRIMARY KEY, customer_id bigint NOT NULL, amount numeric(10,2) NOT NULL,
  status text NOT NULL, created_at timestamptz DEFAULT now());
"""
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def cdc(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "cdc.cli.main", *args],
        cwd=WORK,
        env=env,
        text=True,
        capture_output=True,
    )
    print(result.stdout, end="")
    if result.stderr.strip():
        print(result.stderr, end="", file=sys.stderr)
    if check and result.returncode != 0:
        raise SystemExit(f"cdc {args[0]} failed with exit code {result.returncode}")
    return result


def seed(dsn: str) -> None:
    rng = random.Random(1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        for i in range(500):
            name = f"{rng.choice(NAMES)} {i}"
            conn.execute(
                "INSERT INTO customers (name, email, balance, tags, profile) "
                "VALUES (%s, %s, %s, %s, %s)",
                (
                    name,
                    f"c{i}@example.com",
                    rng.randrange(0, 100000) / 100,
                    ["new"],
                    orjson.dumps({"tier": rng.choice(["gold", "silver"])}).decode(),
                ),
            )


def workload(dsn: str, seconds: float) -> int:
    """Inserts, updates and deletes at a steady pace; returns how many statements ran."""
    rng = random.Random(2)
    done = 0
    deadline = time.monotonic() + seconds
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            with conn.transaction():
                customer = rng.randrange(1, 500)
                conn.execute(
                    "INSERT INTO orders (customer_id, amount, status) VALUES (%s, %s, 'new')",
                    (customer, rng.randrange(100, 50000) / 100),
                )
                conn.execute(
                    "UPDATE customers SET balance = balance + 1, updated_at = now(), "
                    "tags = array_append(tags, 'buyer') WHERE id = %s",
                    (customer,),
                )
                if rng.random() < 0.1:
                    conn.execute("DELETE FROM orders WHERE id = (SELECT min(id) FROM orders)")
            done += 1
            time.sleep(0.01)
    return done


def wait_caught_up(env: dict[str, str], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = subprocess.run(
            [sys.executable, "-m", "cdc.cli.main", "status", "shop.yaml", "--json"],
            cwd=WORK,
            env=env,
            text=True,
            capture_output=True,
        )
        if result.returncode == 0:
            report = orjson.loads(result.stdout)
            # A stopped sink never catches up: say why at once instead of waiting out the clock.
            stopped = [s for s in report["sinks"] if s.get("state") == "stopped"]
            if stopped:
                reasons = "; ".join(f"{s['sink']}: {s.get('reason')}" for s in stopped)
                raise SystemExit(f"a sink stopped: {reasons}")
            if report["topics"] and all(s["lag"] == 0 for s in report["sinks"]):
                return
        time.sleep(1)
    raise SystemExit("the sinks did not catch up in time")


def main() -> None:
    WORK.mkdir(exist_ok=True)
    for stale in (".cdc", "out", "run.log"):
        subprocess.run(["rm", "-rf", str(WORK / stale)], check=True)
    with LocalPostgres() as pg, LocalRedis() as redis:
        dsn = pg.dsn_for(dbname=pg.create_database("shop"))
        env = {**os.environ, "SHOP_PG_DSN": dsn, "SHOP_REDIS_URL": redis.url}
        (WORK / "shop.yaml").write_text(PIPELINE)
        say("seeding 500 customers into a throwaway PostgreSQL 15")
        seed(dsn)
        cdc("validate", "shop.yaml", env=env)
        say("cdc run shop.yaml (snapshot, then streaming) while a workload runs for 10 s")
        with (WORK / "run.log").open("w") as log:
            run = subprocess.Popen(
                [sys.executable, "-m", "cdc.cli.main", "run", "shop.yaml"],
                cwd=WORK,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                print(f"workload: {workload(dsn, 10)} transactions")
                wait_caught_up(env)
                say("cdc status")
                cdc("status", "shop.yaml", env=env)
                say("cdc verify: source and every sink agree")
                cdc("verify", "shop.yaml", env=env)
                say("cdc search shop.yaml public.customers alice")
                cdc("search", "shop.yaml", "public.customers", "alice", "--limit", "3", env=env)
            finally:
                run.send_signal(signal.SIGTERM)
                code = run.wait(15)
        say(f"cdc run stopped cleanly (exit {code}); the warehouse, queried with DuckDB")
        with duckdb.connect(str(WORK / "out" / "shop.duckdb"), read_only=True) as warehouse:
            print(
                warehouse.sql(
                    "SELECT status, count(*) AS orders, sum(amount) AS total "
                    'FROM "public"."orders" GROUP BY status'
                ).fetchall()
            )
        cdc("drop", "shop.yaml", "--yes", env=env)
        say(f"done; the pipeline file, log and outputs are in {WORK}")
        if code != 0:
            raise SystemExit(code)


if __name__ == "__main__":
    main()
