"""The publication DDL as composed (column lists, row filters, options) and the start checks on
the tables it is for; the server's side is in tests/integration/test_pg_partitions.py and
test_pg_publication_filters.py."""

from __future__ import annotations

import pytest

from cdc.contracts.errors import SourceFatal
from cdc.contracts.schema import Column, TableSchema
from connectors.postgres.assembly.evolution import Attribute, diff, resnapshot_reasons
from connectors.postgres.catalog import TableInfo, published_column
from connectors.postgres.publication.spec import (
    TableSpec,
    check_leaves,
    check_partitions,
    check_specs,
    create_statement,
    options_wanted,
    set_tables_statement,
    table_clause,
)


def text(composed: object) -> str:
    return composed.as_string(None)  # type: ignore[attr-defined, no-any-return]


def test_a_table_clause_takes_a_column_list_and_a_row_filter() -> None:
    assert text(table_clause(TableSpec("public", "t"))) == '"public"."t"'
    spec = TableSpec("public", "Orders", ("id", "Region"))
    assert text(table_clause(spec)) == '"public"."Orders" ("id", "Region")'
    spec = TableSpec("s", "t", where="region = 'eu' AND id > 3")
    assert text(table_clause(spec)) == '"s"."t" WHERE (region = \'eu\' AND id > 3)'
    spec = TableSpec("s", "t", ("id",), "id % 2 = 0")
    assert text(table_clause(spec)) == '"s"."t" ("id") WHERE (id % 2 = 0)'
    with pytest.raises(ValueError, match=r"column list of s\.t is empty"):
        table_clause(TableSpec("s", "t", ()))


def test_set_table_and_create_compose_every_table_and_the_options() -> None:
    specs = [TableSpec("public", "a", ("id", "v")), TableSpec("public", "b", where="v <> ''")]
    assert text(set_tables_statement("shop_pub", specs)) == (
        'ALTER PUBLICATION "shop_pub" SET TABLE "public"."a" ("id", "v"), '
        '"public"."b" WHERE (v <> \'\')'
    )
    options = {"publish_via_partition_root": "true", "publish_generated_columns": "stored"}
    assert text(create_statement("p", specs[:1], options)) == (
        'CREATE PUBLICATION "p" FOR TABLE "public"."a" ("id", "v") WITH '
        "(publish_via_partition_root = 'true', publish_generated_columns = 'stored')"
    )
    assert text(create_statement("p", [TableSpec("public", "a")], {})) == (
        'CREATE PUBLICATION "p" FOR TABLE "public"."a"'
    )


def test_filters_below_15_are_a_start_error_naming_the_version() -> None:
    filtered = [TableSpec("public", "a"), TableSpec("public", "b", where="true")]
    with pytest.raises(SourceFatal, match=r"need PostgreSQL 15 or later; the server runs 14"):
        check_specs(filtered, 140019)
    check_specs(filtered, 150000)
    check_specs([TableSpec("public", "a")], 140019)  # no filter: any version


def _info(name: str, **kwargs: object) -> TableInfo:
    schema, _, table = name.partition(".")
    return TableInfo(schema, table, 1, "d", ("id",), **kwargs)  # type: ignore[arg-type]


def test_options_follow_the_tables_and_the_version() -> None:
    plain = _info("public.a")
    parted = _info("public.events", partitioned=True)
    stored = _info("public.g", generated=(("total", "s"), ("label", "v")))
    assert options_wanted([plain], 180000) == {}
    assert options_wanted([plain, parted], 140000) == {"publish_via_partition_root": "true"}
    assert options_wanted([stored], 170000) == {}
    assert options_wanted([stored], 180000) == {"publish_generated_columns": "stored"}
    assert options_wanted([_info("public.v", generated=(("x", "v"),))], 180000) == {}
    assert stored.generated_of("s") == ("total",) and stored.generated_of("v") == ("label",)


def test_a_partition_named_with_its_root_is_a_config_error() -> None:
    root = _info("public.events", partitioned=True)
    leaf = _info("public.events_2024", ancestors=("public.events_y", "public.events"))
    check_partitions([leaf])  # alone: captured as its own table
    check_partitions([root, _info("public.other")])
    with pytest.raises(SourceFatal, match=r"public.events_2024 and public.events, a partitioned"):
        check_partitions([root, leaf])


def test_the_snapshot_reads_generated_columns_where_pgoutput_publishes_them() -> None:
    assert text(published_column("a", 170000)) == '"a"."attgenerated" = \'\''
    assert text(published_column("a", 180000)) == "\"a\".\"attgenerated\" IN ('', 's')"


def test_an_added_generated_column_is_re_read() -> None:
    before = TableSchema("postgresql", "public", "t", (Column("id", "integer", True, False, 1),))
    total = Column("total", "integer", False, True, 2)
    after = TableSchema("postgresql", "public", "t", (*before.columns, total))
    attributes = [Attribute(1, "id"), Attribute(2, "total", has_default=True, generated=True)]
    reasons = resnapshot_reasons(diff(before, after), attributes)
    assert reasons == [
        "column 'total' was added as a generated column: existing rows hold a value PostgreSQL "
        "does not log"
    ]


def test_a_partition_whose_root_is_published_through_is_refused() -> None:
    leaf = _info("public.events_eu", ancestors=("public.events",))
    check_leaves([leaf], {("public", "events_eu"), ("public", "other")}, "p")
    with pytest.raises(SourceFatal, match=r"arrive as public\.events's; capture public\.events"):
        check_leaves([leaf], {("public", "events"), ("public", "events_eu")}, "p")
