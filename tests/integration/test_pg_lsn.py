"""``Lsn`` against a real server: the same numbers, text and order as ``pg_lsn``."""

from __future__ import annotations

import psycopg

from connectors.postgres.lsn import Lsn

TEXTS = ["0/0", "0/1", "0/1E043F8", "16/B374D848", "1/0", "0/FFFFFFFF", "FFFFFFFF/FFFFFFFF"]


def test_lsn_matches_pg_lsn(pg_db: str) -> None:
    with psycopg.connect(pg_db) as conn:
        for text in [*TEXTS, "16/b374d848", "0/00000001"]:
            value, formatted = conn.execute(
                "SELECT (%s::pg_lsn - '0/0'::pg_lsn)::numeric, %s::pg_lsn::text", (text, text)
            ).fetchone() or (None, None)
            lsn = Lsn.parse(text)
            assert lsn == int(value), text
            assert Lsn.parse(formatted) == lsn, text
            if conn.info.server_version < 180000:  # 18 pads the low half to 8 digits
                assert str(lsn) == formatted, text
        row = conn.execute("SELECT '16/B374D848'::pg_lsn + 0").fetchone()
        assert row is not None and Lsn.parse(str(row[0])) == Lsn.parse("16/B374D848")
        for low in TEXTS:
            for high in TEXTS:
                less = conn.execute("SELECT %s::pg_lsn < %s::pg_lsn", (low, high)).fetchone()
                assert less is not None and (Lsn.parse(low) < Lsn.parse(high)) is less[0]


def test_the_servers_current_lsn_round_trips(pg_db: str) -> None:
    with psycopg.connect(pg_db) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        lsn = Lsn.parse(row[0])
        same = conn.execute("SELECT %s::pg_lsn = %s::pg_lsn", (str(lsn), row[0])).fetchone()
        assert same is not None and same[0] is True
        stored = Lsn.from_offsets(dict(lsn.to_offsets()))
        assert stored == lsn and type(stored) is Lsn
