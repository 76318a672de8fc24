"""A table with every type the PostgreSQL source converts, a table with a composite key and a
TOASTed column, and a random workload over both: inserts, updates, deletes and primary-key
changes, in small transactions. Most updates of the second table leave its TOASTed ``body``
unchanged, so ``pgoutput`` sends it as unchanged-TOAST and the source must fill it in."""

from __future__ import annotations

import random
import threading
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.types.json import Json, Jsonb

DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TABLE public.everything (
  id bigint PRIMARY KEY,
  i2 smallint, i4 integer, n numeric(12,3), nn numeric, f4 real, f8 double precision,
  b boolean, t text, vc varchar(20), c char(3), by bytea,
  d date, tm time, ttz timetz, ts timestamp, tstz timestamptz, iv interval,
  u uuid, j json, jb jsonb, ai integer[], at text[], a2 integer[][],
  e mood, dom posint
);
CREATE TABLE public.lines (
  order_id bigint, line_no int, qty int, body text,
  PRIMARY KEY (order_id, line_no)
);
"""

#: Rows of ``public.lines`` written by :func:`create`.
LINES = 200


def random_body(rng: random.Random) -> str:
    """About 10 kB that does not compress below the TOAST threshold: stored out of line."""
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(10_000))


def random_row(rng: random.Random, key: int) -> dict[str, Any]:
    """A row with a random value, or NULL, in every column (the same row for the same seed)."""
    moment = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(
        seconds=rng.randrange(10**8), microseconds=rng.randrange(10**6)
    )
    # One generator drawn from in column order: the helpers run in that order.
    return {"id": key, **_scalars(rng, key), **_temporal(rng, moment), **_structured(rng, key)}


def _maybe(rng: random.Random, value: Any) -> Any:
    return None if rng.random() < 0.1 else value


def _scalars(rng: random.Random, key: int) -> dict[str, Any]:
    return {
        "i2": _maybe(rng, rng.randrange(-32768, 32767)),
        "i4": _maybe(rng, rng.randrange(-(2**31), 2**31 - 1)),
        "n": _maybe(rng, Decimal(rng.randrange(-(10**12), 10**12)) / 1000),
        "nn": _maybe(
            rng,
            rng.choice([Decimal("NaN"), Decimal("1e-20"), Decimal("123456789012345678901234.5")]),
        ),
        "f4": _maybe(rng, rng.choice([1.5, -0.25, float("nan"), float("inf"), 3.0e10])),
        "f8": _maybe(rng, rng.choice([0.1, -1e300, float("-inf"), 2.5])),
        "b": _maybe(rng, rng.random() < 0.5),
        "t": _maybe(
            rng, rng.choice(["plain", "ünïcödé ✓", "quote ' and \" and \\", ""]) + str(key)
        ),
        "vc": _maybe(rng, f"v{rng.randrange(10**6)}"),
        "c": _maybe(rng, rng.choice(["ab", "xyz", "a"])),
        "by": _maybe(rng, bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12)))),
    }


def _temporal(rng: random.Random, moment: datetime) -> dict[str, Any]:
    return {
        "d": _maybe(rng, date(2000, 1, 1) + timedelta(days=rng.randrange(20000))),
        "tm": _maybe(
            rng,
            clock(rng.randrange(24), rng.randrange(60), rng.randrange(60), rng.randrange(10**6)),
        ),
        "ttz": _maybe(rng, "12:34:56.789+05:30"),
        "ts": _maybe(rng, moment.replace(tzinfo=None)),
        "tstz": _maybe(rng, moment),
        "iv": _maybe(rng, timedelta(days=rng.randrange(400), seconds=rng.randrange(86400))),
    }


def _structured(rng: random.Random, key: int) -> dict[str, Any]:
    return {
        "u": _maybe(rng, uuid.UUID(int=rng.getrandbits(128))),
        "j": _maybe(rng, Json({"k": key, "nested": {"list": [1, "two", None]}})),
        "jb": _maybe(rng, Jsonb({"price": 12.5, "tags": ["a", "b"], "n": rng.randrange(100)})),
        "ai": _maybe(rng, [rng.randrange(100), None, rng.randrange(100)]),
        "at": _maybe(rng, ["x", None, "y,z", 'q"t']),
        "a2": _maybe(rng, [[1, 2], [3, rng.randrange(100)]]),
        "e": _maybe(rng, rng.choice(["sad", "ok", "happy"])),
        "dom": _maybe(rng, rng.randrange(1, 1000)),
    }


COLUMNS = list(random_row(random.Random(0), 0))
INSERT = (
    f"INSERT INTO public.everything ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join(['%s'] * len(COLUMNS))})"
)


def create(dsn: str, rows: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(INSERT, [tuple(random_row(rng, k).values()) for k in range(rows)])
            cur.executemany(
                "INSERT INTO public.lines VALUES (%s, %s, %s, %s)",
                [(k // 4, k % 4, k, random_body(rng)) for k in range(LINES)],
            )


class Workload(threading.Thread):
    """Random changes until stopped; ``count`` transactions committed so far."""

    def __init__(self, dsn: str, seed: int = 2, pause_s: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rng, self.pause_s = dsn, random.Random(seed), pause_s
        self.stop_event = threading.Event()
        self.count = 0
        self.next_key = 10**6

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_event.is_set():
                with conn.transaction():
                    for _ in range(self.rng.randrange(1, 5)):
                        self._change(conn)
                self.count += 1
                time.sleep(self.pause_s)

    def _change(self, conn: psycopg.Connection[Any]) -> None:
        if self.rng.random() < 0.25:
            self._change_line(conn)
            return
        roll = self.rng.random()
        existing = conn.execute(
            "SELECT id FROM public.everything ORDER BY random() LIMIT 1"
        ).fetchone()
        if roll < 0.35 or existing is None:
            self.next_key += 1
            conn.execute(INSERT, tuple(random_row(self.rng, self.next_key).values()))
        elif roll < 0.75:
            row = random_row(self.rng, existing[0])
            sets = ", ".join(f"{c} = %s" for c in COLUMNS[1:])
            conn.execute(
                f"UPDATE public.everything SET {sets} WHERE id = %s",
                (*list(row.values())[1:], existing[0]),
            )
        elif roll < 0.9:
            conn.execute("DELETE FROM public.everything WHERE id = %s", existing)
        else:
            self.next_key += 1
            conn.execute(
                "UPDATE public.everything SET id = %s WHERE id = %s", (self.next_key, existing[0])
            )

    def _change_line(self, conn: psycopg.Connection[Any]) -> None:
        """A change to ``public.lines``: mostly an update that leaves ``body`` unchanged."""
        roll = self.rng.random()
        existing = conn.execute(
            "SELECT order_id, line_no FROM public.lines ORDER BY random() LIMIT 1"
        ).fetchone()
        if roll < 0.15 or existing is None:
            self.next_key += 1
            conn.execute(
                "INSERT INTO public.lines VALUES (%s, 0, 1, %s)",
                (self.next_key, random_body(self.rng)),
            )
        elif roll < 0.8:
            conn.execute(
                "UPDATE public.lines SET qty = %s WHERE order_id = %s AND line_no = %s",
                (self.rng.randrange(1000), *existing),
            )
        elif roll < 0.9:
            conn.execute("DELETE FROM public.lines WHERE order_id = %s AND line_no = %s", existing)
        else:  # one part of the composite key changes; body stays (TOAST follows the row)
            self.next_key += 1
            conn.execute(
                "UPDATE public.lines SET line_no = %s WHERE order_id = %s AND line_no = %s",
                (self.next_key - 10**6 + 4, *existing),  # unique: next_key only grows
            )

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
