"""``source.tables`` entries, ``mask_key``, ``transforms`` and ``on_transform_change`` in the
pipeline file: every mistake reported with its YAML path, and the key never shown."""

from __future__ import annotations

import pytest

from cdc.config.pipeline import Pipeline, parse
from cdc.contracts.errors import ConfigError
from cdc.transforms.filters import TableEntry

KEY = "k3y-0f-the-hash-masks-Zq8"

TEXT = """
version: 1
name: shop
source:
  type: generator
  tables:
{tables}
{source_extra}
sinks:
  - name: files
    type: jsonl
    path: out
{sink_extra}
{top}
"""

SHARDS = "    - public.orders_1\n    - public.orders_2\n    - public.users"
ROUTE = "transforms:\n  - {type: route, match: 'public\\.orders_\\d+', topic: public.orders}"


def text(
    tables: str = "    - public.users",
    source_extra: str = "",
    sink_extra: str = "",
    top: str = "",
) -> str:
    return TEXT.format(tables=tables, source_extra=source_extra, sink_extra=sink_extra, top=top)


def valid(**parts: str) -> Pipeline:
    return parse(text(**parts), {"MASK_KEY": KEY})


def problems_of(**parts: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse(text(**parts), {"MASK_KEY": KEY})
    return dict(info.value.problems)


def entry(yaml: str) -> dict[str, str]:
    """The problems of one ``source.tables`` item written in flow style."""
    return problems_of(tables=f"    - {yaml}")


# -- columns ---------------------------------------------------------------------------------


def test_include_and_exclude_together() -> None:
    problems = entry("{name: public.u, columns: {include: [a], exclude: [b]}}")
    assert problems == {"source.tables[0].columns": "give either include or exclude"}


def test_columns_without_either_list() -> None:
    problems = entry("{name: public.u, columns: {}}")
    assert problems == {"source.tables[0].columns": "give either include or exclude"}


@pytest.mark.parametrize("kind", ["include", "exclude"])
def test_empty_column_list(kind: str) -> None:
    problems = entry(f"{{name: public.u, columns: {{{kind}: []}}}}")
    assert list(problems) == [f"source.tables[0].columns.{kind}"]
    assert "at least 1 item" in problems[f"source.tables[0].columns.{kind}"]


def test_column_listed_twice() -> None:
    problems = entry("{name: public.u, columns: {exclude: [a, b, a]}}")
    assert problems == {"source.tables[0].columns": "a column is listed more than once"}


@pytest.mark.parametrize(
    "columns", ["{exclude: [ssn]}", "{include: [id, email]}"], ids=["excluded", "not-included"]
)
def test_mask_on_a_column_that_never_leaves(columns: str) -> None:
    problems = entry(f"{{name: public.u, columns: {columns}, mask: {{ssn: redact}}}}")
    assert list(problems) == ["source.tables[0]"]
    assert "mask names ['ssn']" in problems["source.tables[0]"]
    assert "needs no mask" in problems["source.tables[0]"]


# -- masks -----------------------------------------------------------------------------------


def test_keep_last_without_n() -> None:
    problems = entry("{name: public.u, mask: {phone: keep_last}}")
    assert problems == {
        "source.tables[0].mask.phone": "keep_last needs n, the number of characters kept"
    }


def test_negative_n() -> None:
    problems = entry("{name: public.u, mask: {phone: {type: keep_last, n: -1}}}")
    assert list(problems) == ["source.tables[0].mask.phone.n"]


def test_n_on_another_mask() -> None:
    problems = entry("{name: public.u, mask: {email: {type: redact, n: 3}}}")
    assert problems == {"source.tables[0].mask.email": "n applies to keep_last only, not redact"}


def test_plugin_without_name() -> None:
    problems = entry("{name: public.u, mask: {email: {type: plugin}}}")
    assert problems == {
        "source.tables[0].mask.email": "a plugin mask needs name: the cdc.masks entry point"
    }


def test_plugin_parameters_on_a_builtin_mask() -> None:
    problems = entry("{name: public.u, mask: {email: {type: redact, name: x}}}")
    assert "apply to plugin masks only" in problems["source.tables[0].mask.email"]


def test_unknown_mask_type() -> None:
    problems = entry("{name: public.u, mask: {email: scramble}}")
    assert list(problems) == ["source.tables[0].mask.email.type"]
    assert (
        "'hash', 'redact', 'null', 'keep_last' or 'plugin'"
        in problems["source.tables[0].mask.email.type"]
    )


def test_hash_mask_needs_mask_key_reported_under_source_mask_key() -> None:
    problems = entry("{name: public.u, mask: {email: hash, ssn: {type: hash}}}")
    assert list(problems) == ["source.mask_key"]
    assert "public.u.email, public.u.ssn" in problems["source.mask_key"]
    assert "${CDC_MASK_KEY}" in problems["source.mask_key"]


def test_short_mask_key() -> None:
    problems = problems_of(
        tables="    - {name: public.u, mask: {email: hash}}", source_extra="  mask_key: abc123"
    )
    assert problems == {
        "source.mask_key": "must be at least 16 characters: a short key can be guessed"
    }


def test_mask_key_without_hash_masks_is_valid() -> None:
    pipeline = valid(source_extra="  mask_key: ${MASK_KEY}")
    assert pipeline.source.mask_key_bytes() == KEY.encode()


def test_yaml_null_and_text_null_are_both_the_null_mask() -> None:
    pipeline = valid(tables="    - {name: public.u, mask: {notes: null, memo: 'null'}}")
    masks = pipeline.source.tables[0].mask
    assert masks["notes"].type == masks["memo"].type == "null"
    assert masks["notes"] == masks["memo"]


def test_mask_shorthand_and_mapping_are_one_spec() -> None:
    pipeline = valid(
        tables="    - {name: public.u, mask: {a: redact, b: {type: redact}}}",
    )
    masks = pipeline.source.tables[0].mask
    assert masks["a"] == masks["b"]


# -- where and ops ---------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["''", "'   '", "{}"])
def test_empty_where(where: str) -> None:
    problems = entry(f"{{name: public.u, where: {where}}}")
    assert problems == {"source.tables[0].where": "is empty: leave it out to capture every row"}


def test_unknown_op() -> None:
    problems = entry("{name: public.u, ops: [c, x]}")
    assert list(problems) == ["source.tables[0].ops[1]"]
    assert "'c', 'u', 'd', 'r' or 't'" in problems["source.tables[0].ops[1]"]


def test_duplicate_op() -> None:
    problems = entry("{name: public.u, ops: [c, u, c]}")
    assert problems == {"source.tables[0].ops": "an operation is listed more than once"}


def test_empty_ops() -> None:
    assert list(entry("{name: public.u, ops: []}")) == ["source.tables[0].ops"]


def test_unknown_key_in_an_entry() -> None:
    assert entry("{name: public.u, colums: {exclude: [a]}}") == {
        "source.tables[0].colums": "unknown key; did you mean `columns`?"
    }


# -- names -----------------------------------------------------------------------------------


def test_plain_names_and_mappings_mix() -> None:
    pipeline = valid(
        tables="    - public.orders\n    - {name: public.users, columns: {exclude: [pw]}}"
    )
    assert pipeline.source.table_names == ["public.orders", "public.users"]
    assert pipeline.source.tables[0] == TableEntry(name="public.orders")
    assert not pipeline.source.tables[0].filtered
    assert pipeline.source.tables[1].filtered
    assert not pipeline.source.tables[1].keeps("pw")


@pytest.mark.parametrize(
    "tables",
    [
        "    - public.users\n    - {name: public.users, ops: [c]}",
        "    - {name: public.users}\n    - public.users",
        "    - public.users\n    - public.users",
    ],
    ids=["name-then-mapping", "mapping-then-name", "names"],
)
def test_duplicate_table_across_forms(tables: str) -> None:
    assert problems_of(tables=tables) == {"source.tables": "tables are listed more than once"}


def test_unqualified_names_in_both_forms() -> None:
    assert "schema.table" in problems_of(tables="    - users")["source.tables"]
    problems = entry("{name: users}")
    assert "must be qualified as schema.table" in problems["source.tables[0].name"]


def test_every_entry_mistake_is_reported_at_once() -> None:
    problems = problems_of(
        tables=(
            "    - {name: public.a, ops: [x]}\n"
            "    - {name: public.b, mask: {p: keep_last}}\n"
            "    - {name: public.c, where: ''}"
        )
    )
    assert set(problems) == {
        "source.tables[0].ops[0]",
        "source.tables[1].mask.p",
        "source.tables[2].where",
    }


# -- transforms ------------------------------------------------------------------------------


def test_unknown_transform_type_names_the_installed_ones() -> None:
    problems = problems_of(top="transforms:\n  - {type: frobnicate}")
    assert list(problems) == ["transforms[0].type"]
    message = problems["transforms[0].type"]
    assert "unknown transform type 'frobnicate'" in message
    assert "add_field, rename_fields, route" in message


def test_transform_without_type() -> None:
    assert problems_of(top="transforms:\n  - {match: x}") == {
        "transforms[0].type": "a type is required"
    }


def test_transform_unknown_key() -> None:
    problems = problems_of(
        tables=SHARDS, top=ROUTE.replace("topic: public.orders", "topic: public.orders, to: x")
    )
    assert problems == {"transforms[0].to": "unknown key"}


def test_bad_route_regex() -> None:
    problems = problems_of(top="transforms:\n  - {type: route, match: '(', topic: public.x}")
    assert list(problems) == ["transforms[0].match"]
    assert problems["transforms[0].match"].startswith("not a regular expression")


def test_route_topic_must_be_schema_table() -> None:
    problems = problems_of(
        tables=SHARDS, top=ROUTE.replace("topic: public.orders", "topic: orders")
    )
    assert problems == {"transforms[0]": "topic 'orders' must be a schema.table (or db.collection)"}


@pytest.mark.parametrize("ref", ["\\2", "\\g<2>"])
def test_route_group_reference_beyond_the_pattern(ref: str) -> None:
    top = f"transforms:\n  - {{type: route, match: 'public\\.orders_(\\d+)', topic: 'o.x{ref}'}}"
    problems = problems_of(tables=SHARDS, top=top)
    assert problems == {"transforms[0]": f"topic refers to group {ref}, which match lacks"}


def test_route_unknown_named_group_is_a_config_error() -> None:
    top = "transforms:\n  - {type: route, match: 'public\\.(o)rders_\\d+', topic: 'p.\\g<nope>'}"
    problems = problems_of(tables=SHARDS, top=top)
    assert list(problems) == ["transforms[0]"]
    assert "unknown group name 'nope'" in problems["transforms[0]"]


def test_route_named_group_is_valid() -> None:
    top = "transforms:\n  - {type: route, match: 'public\\.(?P<t>orders)_\\d+', topic: 'p.\\g<t>'}"
    pipeline = valid(tables=SHARDS, top=top)
    assert pipeline.output_tables() == ["p.orders", "public.users"]


def test_route_expanding_to_no_table_names_the_table() -> None:
    top = "transforms:\n  - {type: route, match: '(.*)', topic: 'x.\\1'}"
    problems = problems_of(tables=SHARDS, top=top)
    assert list(problems) == ["transforms[0]"]
    assert problems["transforms[0]"].startswith("the route transform refused its settings: ")
    assert "sends public.orders_1 to 'x.public.orders_1'" in problems["transforms[0]"]


def test_add_field_needs_value_or_source() -> None:
    problems = problems_of(top="transforms:\n  - {type: add_field, field: region}")
    assert "give value" in problems["transforms[0]"]
    problems = problems_of(
        top="transforms:\n  - {type: add_field, field: region, value: eu, source: op}"
    )
    assert problems == {"transforms[0]": "give value or source, not both"}
    problems = problems_of(top="transforms:\n  - {type: add_field, field: r, source: nope}")
    assert "source must be op, table or source.<field>" in problems["transforms[0]"]


def test_rename_fields_to_one_name() -> None:
    problems = problems_of(top="transforms:\n  - {type: rename_fields, fields: {a: c, b: c}}")
    assert problems == {"transforms[0]": "two fields are renamed to the same name"}


def test_second_transform_mistake_is_reported_with_its_index() -> None:
    top = ROUTE + "\n  - {type: add_field, field: '1bad', value: 1}"
    problems = problems_of(tables=SHARDS, top=top)
    assert list(problems) == ["transforms[1].field"]


# -- sinks' tables and the routed topics -----------------------------------------------------


def test_sink_naming_a_routed_away_source_table_names_the_target() -> None:
    problems = problems_of(tables=SHARDS, top=ROUTE, sink_extra="    tables: [public.orders_2]")
    assert problems == {
        "sinks[0].tables[0]": "'public.orders_2' is routed to 'public.orders' by the "
        "transforms: name that table"
    }


def test_sink_naming_the_routed_table_is_valid() -> None:
    pipeline = valid(
        tables=SHARDS, top=ROUTE, sink_extra="    tables: [public.orders, public.users]"
    )
    assert pipeline.output_tables() == ["public.orders", "public.users"]
    assert pipeline.routed_from("public.orders") == ["public.orders_1", "public.orders_2"]
    sink = pipeline.sinks[0]
    assert pipeline.sink_tables(sink) == [("public", "orders"), ("public", "users")]


def test_sink_without_tables_gets_the_routed_tables() -> None:
    pipeline = valid(tables=SHARDS, top=ROUTE)
    assert pipeline.sink_tables(pipeline.sinks[0]) == [("public", "orders"), ("public", "users")]


def test_sink_naming_an_unknown_table() -> None:
    problems = problems_of(tables=SHARDS, top=ROUTE, sink_extra="    tables: [public.nope]")
    assert problems == {"sinks[0].tables[0]": "'public.nope' is not a source table"}


# -- on_transform_change ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["resnapshot", "continue", "fail"])
def test_on_transform_change_values(policy: str) -> None:
    pipeline = valid(top=f"on_transform_change: {policy}")
    assert pipeline.file.on_transform_change == policy


def test_on_transform_change_defaults_to_fail() -> None:
    assert valid().file.on_transform_change == "fail"


def test_on_transform_change_unknown_value() -> None:
    problems = problems_of(top="on_transform_change: ignore")
    assert list(problems) == ["on_transform_change"]
    assert "'resnapshot', 'continue' or 'fail'" in problems["on_transform_change"]


# -- the mask key stays secret ---------------------------------------------------------------

HASHED = "    - {name: public.u, mask: {email: hash}}"


def test_mask_key_is_not_in_config_errors() -> None:
    with pytest.raises(ConfigError) as info:
        parse(
            text(
                tables=HASHED + "\n    - {name: public.v, ops: [x]}",
                source_extra="  mask_key: ${MASK_KEY}",
                top="on_transform_change: sometimes",
            ),
            {"MASK_KEY": KEY},
        )
    assert KEY not in str(info.value)
    assert KEY not in repr(info.value)
    assert all(KEY not in message for _, message in info.value.problems)


def test_short_mask_key_is_not_in_the_error() -> None:
    short = "Sh0rtK3y"
    with pytest.raises(ConfigError) as info:
        parse(text(tables=HASHED, source_extra=f"  mask_key: {short}"), {})
    assert short not in str(info.value)


def test_mask_key_is_not_in_the_source_config_repr() -> None:
    pipeline = valid(tables=HASHED, source_extra="  mask_key: ${MASK_KEY}")
    assert pipeline.source.mask_key_bytes() == KEY.encode()
    assert KEY not in repr(pipeline.source)
    assert KEY not in str(pipeline.source)
    assert KEY not in repr(pipeline.source.tables)


def test_mask_key_is_not_in_the_pipeline_repr() -> None:
    pipeline = valid(tables=HASHED, source_extra="  mask_key: ${MASK_KEY}")
    assert KEY not in repr(pipeline)


# -- compiled masks --------------------------------------------------------------------------


def test_compiled_masks() -> None:
    from cdc.transforms.masks import compile_mask, hash_text

    key = KEY.encode()
    assert compile_mask("redact")("anything") == "***"
    assert compile_mask("null")("anything") is None
    assert compile_mask("keep_last", n=4)("555-123-4567") == "********4567"
    assert compile_mask("keep_last", n=0)("abc") == "***"
    assert compile_mask("keep_last", n=9)("abc") == "abc"
    hashed = compile_mask("hash", key=key)
    assert hashed("a@example.test") == hashed("a@example.test") == hash_text(key, "a@example.test")
    assert hashed("a@example.test") != compile_mask("hash", key=b"x" * 16)("a@example.test")
    assert len(hashed("x")) == 64


def test_compiled_mask_errors_and_repr() -> None:
    from cdc.contracts.errors import PluginNotFound
    from cdc.transforms.masks import compile_mask

    with pytest.raises(ValueError, match="mask_key"):
        compile_mask("hash")
    with pytest.raises(ValueError, match="keep_last needs n"):
        compile_mask("keep_last")
    with pytest.raises(PluginNotFound, match="unknown mask plugin 'nope'"):
        compile_mask("plugin", plugin="nope")
    hashed = compile_mask("hash", key=KEY.encode())
    assert KEY not in repr(hashed) and KEY not in str(hashed)
    assert repr(hashed) == "Mask('hash')"


def test_entry_helpers() -> None:
    users = valid(
        tables="    - {name: public.users, columns: {include: [id, email]}, ops: [c, u]}"
    ).source.table_entry("public.users")
    assert (users.schema_name, users.table_name) == ("public", "users")
    assert users.keeps("email") and not users.keeps("password")
    assert users.allows("u") and not users.allows("d")
    plain = valid().source.table_entry("public.other")
    assert plain == TableEntry(name="public.other")
    assert plain.allows("t") and plain.keeps("anything") and not plain.filtered
