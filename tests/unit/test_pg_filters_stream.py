"""The assembler with table filters, without a server: where the server still sends a column
the filter leaves out (PostgreSQL 14, a ``REPLICA IDENTITY FULL`` table) the source drops it
from every tuple before anything is converted; masks apply to rows, keys and dead letters; an
unchanged TOASTed value of a routed table is looked up where its records went."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import structlog

from cdc.contracts.errors import SourceFatal
from cdc.contracts.events import Op
from cdc.envelope.encode import to_records
from cdc.transforms.chain import build_chain
from cdc.transforms.filters import TableEntry
from cdc.transforms.masks import compile_mask, hash_text
from cdc.transforms.route import RouteConfig
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.assembler import Assembler
from connectors.postgres.assembly.toast import ToastFiller
from connectors.postgres.catalog import TableInfo
from connectors.postgres.publication.filters import TableFilter
from tests.unit.test_pg_stream import INT4, TEXT, FakeCatalog, FakeLog, _tx

KEY = b"unit-mask-key-0123456789"
U = pg.UNCHANGED


def _filter(**entry: Any) -> TableFilter:
    table = TableEntry.model_validate({"name": "public.t", **entry})
    masks = {c: compile_mask(s.type, n=s.n, key=KEY) for c, s in table.mask.items()}
    return TableFilter(table, masks)


def _assembler(
    table_filter: TableFilter,
    log: FakeLog | None = None,
    catalog: FakeCatalog | None = None,
    on_bad_record: str = "fail",
    **options: Any,
) -> Assembler:
    info = TableInfo("public", "t", 1, "f", ("id",))
    logger = structlog.get_logger()
    return Assembler(
        "p",
        "db",
        {("public", "t"): info},
        {},
        catalog or FakeCatalog(),
        ToastFiller(log or FakeLog(), logger),  # type: ignore[arg-type]
        on_bad_record,
        logger,
        filters={"public.t": table_filter},
        **options,
    )


def _relation(*names: str, types: tuple[int, ...] = ()) -> pg.Relation:
    kinds = types or (INT4,) + (TEXT,) * (len(names) - 1)
    columns = tuple(pg.RelationColumn(True, n, t, -1) for n, t in zip(names, kinds, strict=True))
    return pg.Relation(1, "public", "t", "f", columns)


SECRET = _filter(
    columns={"exclude": ["secret"]},
    mask={"email": "hash", "phone": {"type": "keep_last", "n": 2}, "note": "redact"},
)


def test_a_column_the_server_sends_is_dropped_before_anything_is_converted() -> None:
    asm = _assembler(SECRET)
    relation = _relation("id", "email", "secret", "phone", "note")
    batch = _tx(
        asm,
        relation,
        pg.Insert(1, ("1", "a@x.test", "pw-1", "5551234", None)),
        pg.Update(
            1, ("1", "a@x.test", "pw-1", "5551234", None), "O", ("1", "b@x.test", "pw-2", "55", "n")
        ),
        pg.Delete(1, ("1", "b@x.test", "pw-2", "55", "n"), "O"),
    )
    insert, update, delete = batch.events
    assert insert.after == {
        "id": 1,
        "email": hash_text(KEY, "a@x.test"),
        "phone": "*****34",
        "note": None,  # NULL stays NULL under every mask
    }
    assert update.before == insert.after
    assert update.after == {
        "id": 1,
        "email": hash_text(KEY, "b@x.test"),
        "phone": "55",
        "note": "***",
    }
    assert delete.before == update.after
    [schema] = batch.schemas
    assert [(c.name, c.type) for c in schema.columns] == [
        ("id", "integer"),
        ("email", "text"),
        ("phone", "text"),
        ("note", "text"),
    ]
    written = b"".join(r.value or b"" for e in batch.events for r in to_records(e, "p"))
    assert b"pw-" not in written and b"@x.test" not in written and b"5551234" not in written


def test_a_dead_letter_shows_no_more_than_a_record_would() -> None:
    asm = _assembler(SECRET, on_bad_record="dead_letter")
    relation = _relation("id", "email", "secret", "phone", "note")
    batch = _tx(asm, relation, pg.Insert(1, ("not-an-int", "a@x.test", "pw-1", "5551234", "n")))
    [letter] = batch.dead_letters
    assert letter.payload["values"] == {
        "id": "not-an-int",
        "email": hash_text(KEY, "a@x.test"),
        "phone": "*****34",
        "note": "***",
    }
    assert b"pw-1" not in orjson.dumps(letter.payload)


def test_a_key_column_is_only_hashed() -> None:
    relation = _relation("id", "email")
    for bad, problem in (
        (_filter(columns={"exclude": ["id"]}), "leaves out key"),
        (_filter(mask={"id": "redact"}), "may only be hashed"),
    ):
        asm = _assembler(bad)
        with pytest.raises(SourceFatal, match=problem):
            _tx(asm, relation, pg.Insert(1, ("1", "a")))
    hashed = _assembler(_filter(mask={"id": "hash"}))
    [event] = _tx(hashed, relation, pg.Insert(1, ("7", "a"))).events
    assert event.key == {"id": hash_text(KEY, "7")}


def test_a_routed_tables_toast_value_is_found_in_its_merged_topic() -> None:
    log, catalog = FakeLog(), FakeCatalog()
    route = RouteConfig(match=r"public\.t", topic="public.merged")
    chain = build_chain([route], "p", ["public.t"])
    asm = _assembler(_filter(), log, catalog, transforms=chain)
    routed_key = orjson.dumps({"id": 1, "__dbz__physicalTableIdentifier": "p.public.t"})
    log.values[("p.public.merged", routed_key)] = orjson.dumps({"after": {"big": "from-log"}})
    relation = _relation("id", "v", "big")
    [event] = _tx(asm, relation, pg.Update(1, None, None, ("1", "x", U))).events
    assert event.op is Op.UPDATE and event.after["big"] == "from-log"
    assert catalog.reads == []  # not read from the table: found where the records went
