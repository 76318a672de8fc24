"""The relation-diff rules without a server: two shapes (and pg_attribute rows) in, the change
and the re-snapshot decision out."""

from __future__ import annotations

import pytest

from cdc.contracts.schema import Column, TableSchema
from connectors.postgres.assembly.evolution import (
    Attribute,
    ShapeChange,
    column_ids,
    diff,
    keeps_values,
    resnapshot_reasons,
)


def shape(*columns: Column) -> TableSchema:
    return TableSchema("postgresql", "public", "t", columns)


def col(name: str, type_: str = "text", id_: int | None = None) -> Column:
    return Column(name, type_, key=name == "id", id=id_)


ID = col("id", "integer", 1)


def test_a_rename_keeps_the_id_and_is_a_rename_not_a_drop_and_an_add() -> None:
    change = diff(shape(ID, col("a", id_=2)), shape(ID, col("b", id_=2)))
    assert [(o.name, n.name) for o, n in change.renamed] == [("a", "b")]
    assert change.added == () and change.dropped == () and change.retyped == ()


def test_a_drop_and_an_add_of_the_same_type_at_the_same_place_is_not_a_rename() -> None:
    # The Relation messages are identical (id, text); only the attnum differs.
    change = diff(shape(ID, col("a", id_=2)), shape(ID, col("b", id_=3)))
    assert [c.name for c in change.dropped] == ["a"] and [c.name for c in change.added] == ["b"]
    assert change.renamed == ()


def test_without_ids_columns_pair_by_name() -> None:
    change = diff(shape(col("id", "integer"), col("a")), shape(col("id", "integer"), col("b")))
    assert [c.name for c in change.dropped] == ["a"] and [c.name for c in change.added] == ["b"]
    same = diff(shape(col("id", "integer"), col("a")), shape(ID, col("a", id_=2)))
    assert same.empty  # ids learnt for the first time change nothing


def test_swapped_names_are_two_renames() -> None:
    old = shape(ID, col("a", id_=2), col("b", id_=3))
    change = diff(old, shape(ID, col("b", id_=2), col("a", id_=3)))
    assert {(o.name, n.name) for o, n in change.renamed} == {("a", "b"), ("b", "a")}


def test_a_type_change_is_found_on_the_same_column_under_a_new_name_too() -> None:
    change = diff(shape(ID, col("n", "integer", 2)), shape(ID, col("m", "text", 2)))
    assert [(o.type, n.type) for o, n in change.retyped] == [("integer", "text")]
    assert change.to_json() == {"renamed": {"n": "m"}, "retyped": {"m": "integer -> text"}}


def test_nullability_alone_is_no_change() -> None:
    old = shape(ID, Column("a", "text", id=2))
    assert diff(old, shape(ID, Column("a", "text", nullable=False, id=2))).empty


def attrs(
    *rows: tuple[int, str], dropped: tuple[int, ...] = (), flag: str = "", on: int = 0
) -> list[Attribute]:
    """pg_attribute rows; ``flag`` (``default``, ``missing``, ``identity``) set on attnum ``on``."""
    return [
        Attribute(
            n,
            name,
            dropped=n in dropped,
            has_default=flag == "default" and n == on,
            has_missing=flag == "missing" and n == on,
            identity=flag == "identity" and n == on,
        )
        for n, name in rows
    ]


def test_ids_come_from_the_catalog_by_name() -> None:
    found = attrs((1, "id"), (2, "........pg.dropped.2........"), (3, "b"), dropped=(2,))
    assert column_ids(["id", "b"], found, None) == [1, 3]


def test_an_id_out_of_attnum_order_is_not_trusted_and_the_previous_one_is_kept() -> None:
    # The stream still shows (id, a, b); the catalog has since renamed a -> x and b -> a.
    found = attrs((1, "id"), (2, "x"), (3, "a"))
    previous = shape(ID, col("a", id_=2), col("b", id_=3))
    assert column_ids(["id", "a", "b"], found, None) == [1, 3, None]
    # ``a`` resolves to 3, the old ``b``'s attnum: the documented limit (the catalog is read as
    # it is now, and a lookup in order is trusted); ``b`` cannot take 3 a second time.
    assert column_ids(["id", "a", "b"], found, previous) == [1, 3, None]
    found = attrs((1, "id"), (2, "x"))
    assert column_ids(["id", "a", "b"], found, previous) == [1, 2, 3]


def test_a_name_gone_from_the_catalog_keeps_its_previous_id_so_a_later_rename_is_seen() -> None:
    # Stopped pipeline: RENAME a TO b happened; the stream replays changes of the old shape first.
    now = attrs((1, "id"), (2, "b"))
    known = shape(ID, col("a", id_=2))
    old_shape = shape(ID, col("a", id_=column_ids(["id", "a"], now, known)[1]))
    assert old_shape.columns[1].id == 2
    new_shape = shape(ID, col("b", id_=column_ids(["id", "b"], now, old_shape)[1]))
    assert [(o.name, n.name) for o, n in diff(old_shape, new_shape).renamed] == [("a", "b")]


def reasons(change: ShapeChange, attributes: list[Attribute]) -> list[str]:
    return resnapshot_reasons(change, attributes)


def test_a_nullable_column_added_without_a_default_needs_no_resnapshot() -> None:
    change = diff(shape(ID), shape(ID, col("c", id_=2)))
    assert reasons(change, attrs((1, "id"), (2, "c"))) == []


@pytest.mark.parametrize("flag", ["default", "missing", "identity"])
def test_a_column_added_with_values_for_existing_rows_needs_a_resnapshot(flag: str) -> None:
    # missing: ADD COLUMN ... DEFAULT 5 (stored once); default only: a volatile default (the
    # table was rewritten); identity: GENERATED ... AS IDENTITY numbers every row.
    change = diff(shape(ID), shape(ID, col("c", id_=2)))
    found = reasons(change, attrs((1, "id"), (2, "c"), flag=flag, on=2))
    assert len(found) == 1 and "'c' was added" in found[0]


def test_an_added_column_the_catalog_no_longer_knows_is_read_again() -> None:
    change = diff(shape(ID), shape(ID, col("c", id_=2)))
    assert reasons(change, attrs((1, "id"), (2, "c2")))  # renamed since: its default is unknown
    assert reasons(change, attrs((1, "id"), (2, "x"), dropped=(2,)))
    assert reasons(diff(shape(ID), shape(ID, col("c"))), attrs((1, "id")))


def test_renames_drops_and_value_rewriting_type_changes_need_a_resnapshot() -> None:
    old = shape(ID, col("a", id_=2), col("b", id_=3), col("n", "numeric(10,2)", 4))
    new = shape(ID, col("a2", id_=2), col("n", "numeric(12,3)", 4))
    found = reasons(diff(old, new), attrs((1, "id"), (2, "a2"), (4, "n")))
    assert len(found) == 3
    assert "renamed to 'a2'" in found[0] and "'b' was dropped" in found[1]
    assert "numeric(10,2) to numeric(12,3)" in found[2]


def test_a_type_change_that_keeps_every_value_needs_no_resnapshot() -> None:
    old = shape(ID, col("v", "character varying(10)", 2))
    new = shape(ID, col("v", "character varying(20)", 2))
    assert reasons(diff(old, new), attrs((1, "id"), (2, "v"))) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("smallint", "integer"),
        ("integer", "bigint"),
        ("character varying(10)", "character varying(20)"),
        ("character varying(20)", "character varying(10)"),  # refused if a value does not fit
        ("character varying(10)", "text"),
        ("text", "character varying"),
        ("numeric(10,2)", "numeric(12,2)"),
        ("numeric(10,2)", "numeric"),
        ("timestamp(3) with time zone", "timestamp(6) with time zone"),
        ("timestamp(3) without time zone", "timestamp without time zone"),
        ("integer[]", "bigint[]"),
    ],
)
def test_value_keeping_type_changes(old: str, new: str) -> None:
    assert keeps_values(old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("integer", "text"),
        ("bigint", "integer"),
        ("integer", "numeric(12,2)"),
        ("numeric(10,2)", "numeric(12,3)"),
        ("numeric", "numeric(10,2)"),
        ("character(5)", "character(10)"),
        ("character varying(5)", "character(5)"),
        ("json", "jsonb"),
        ("timestamp(6) with time zone", "timestamp(3) with time zone"),
        ("timestamp without time zone", "timestamp with time zone"),
        ("integer[]", "integer"),
        ("oid:16384", "oid:16390"),
    ],
)
def test_value_rewriting_type_changes(old: str, new: str) -> None:
    assert not keeps_values(old, new)
