"""PostgreSQL's fields of a record's ``source`` block, as Debezium's connector writes them:
``lsn``, ``xmin``, ``origin`` and ``origin_lsn`` after ``txId``, and ``sequence``, the text
``["<last commit lsn>","<lsn>"]``. The stream's row writers, the snapshot's rows and its watermark
window all write them through here."""

from __future__ import annotations

from typing import Any, Final

#: PostgreSQL's ``source`` fields after ``lsn``: always null here (no xmin, no origins).
PG_TAIL: Final = b',"xmin":null,"origin":null,"origin_lsn":null'


def lsn_extra(lsn: int) -> bytes:
    """The ``source`` fields after ``txId`` (:func:`cdc.envelope.template.extra_json`) of
    ``{"lsn": lsn, "xmin": None, "origin": None, "origin_lsn": None}``."""
    return b',"lsn":%d%b' % (lsn, PG_TAIL)


def pg_order(last_commit: int | None, lsn: int) -> str:
    """PostgreSQL's ``source.sequence``: ``["<last commit lsn>","<lsn>"]`` (Debezium's)."""
    if last_commit is None:
        return f'[null,"{int(lsn)}"]'
    return f'["{int(last_commit)}","{int(lsn)}"]'


def lsn_fields(lsn: int | None) -> dict[str, Any]:
    """PostgreSQL's ``source`` fields after ``txId`` (:func:`lsn_extra`'s)."""
    return {"lsn": lsn, "xmin": None, "origin": None, "origin_lsn": None}
