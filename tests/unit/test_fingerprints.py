"""What a start does when the log was written under other transforms or table filters
(cdc.runtime.fingerprints): the comparison, the three policies, and the mask key's check."""

from __future__ import annotations

from typing import Any

import pytest

from cdc.config.pipeline import Pipeline, parse
from cdc.runtime import fingerprints
from cdc.runtime.fingerprints import OFFSET_KEY, TransformsChanged, key_check, plan
from cdc.support.logging import get_logger

KEY_A = "first-mask-key-0123456789"
KEY_B = "second-mask-key-9876543210"
ADD = "transforms:\n  - {type: add_field, field: region, value: eu}"

TEXT = """
version: 1
name: shop
source:
  type: generator
  tables:
{tables}
{source_extra}
{top}
"""
PLAIN = "    - public.a\n    - public.b"
FILTERED = "    - {name: public.a, ops: [c, u]}\n    - public.b"
HASHED = "    - {name: public.a, mask: {email: hash}}\n    - public.b"


def pipeline(
    tables: str = PLAIN,
    top: str = "",
    policy: str = "fail",
    key: str | None = None,
) -> Pipeline:
    extra = "" if key is None else f"  mask_key: {key}"
    text = TEXT.format(
        tables=tables, source_extra=extra, top=f"{top}\non_transform_change: {policy}"
    )
    return parse(text, {})


def written_by(p: Pipeline) -> dict[str, Any]:
    """Source offsets as a run of ``p`` left them."""
    return {"slot": {"lsn": 42}, OFFSET_KEY: fingerprints.current(p)}


LOG = get_logger()


def test_first_start_stores_the_fingerprint() -> None:
    p = pipeline(FILTERED, ADD)
    started = plan(p, {}, LOG)
    assert started.store == fingerprints.current(p)
    assert started.resnapshot == ()


def test_unchanged_start() -> None:
    p = pipeline(FILTERED, ADD)
    assert plan(p, written_by(p), LOG).resnapshot == ()


def test_the_stored_value_is_digests_only() -> None:
    stored = fingerprints.current(pipeline(HASHED, ADD, key=KEY_A))
    assert set(stored) == {"transforms", "tables", "mask_key"}
    assert set(stored["tables"]) == {"public.a", "public.b"}
    for value in (stored["transforms"], stored["mask_key"], *stored["tables"].values()):
        assert isinstance(value, str) and len(value) == 16
        int(value, 16)


def test_changed_table_entry_fails_by_default_naming_it_and_the_choices() -> None:
    before = pipeline(PLAIN)
    with pytest.raises(TransformsChanged) as info:
        plan(pipeline(FILTERED), written_by(before), LOG)
    [(where, message)] = info.value.problems
    assert where == "on_transform_change"
    assert "public.a" in message and "public.b" not in message
    assert "the columns, masks, row filter or ops of public.a" in message
    assert "on_transform_change: resnapshot" in message
    assert "continue" in message


def test_changed_transforms_fail_naming_the_transforms() -> None:
    with pytest.raises(TransformsChanged) as info:
        plan(pipeline(top=ADD), written_by(pipeline()), LOG)
    message = info.value.problems[0][1]
    assert "the transforms" in message
    assert "public.a" not in message


def test_continue_takes_the_new_settings() -> None:
    now = pipeline(FILTERED, ADD, policy="continue")
    started = plan(now, written_by(pipeline()), LOG)
    assert started.resnapshot == ()
    assert started.store == fingerprints.current(now)


def test_resnapshot_of_a_changed_entry_rereads_that_table_only() -> None:
    started = plan(pipeline(FILTERED, policy="resnapshot"), written_by(pipeline()), LOG)
    assert started.resnapshot == ("public.a",)


def test_resnapshot_of_changed_transforms_rereads_every_table() -> None:
    started = plan(pipeline(top=ADD, policy="resnapshot"), written_by(pipeline()), LOG)
    assert started.resnapshot == ("public.a", "public.b")


def test_a_new_table_is_not_a_change() -> None:
    now = pipeline(PLAIN + "\n    - {name: public.c, ops: [c]}")
    started = plan(now, written_by(pipeline()), LOG)
    assert started.resnapshot == ()
    assert "public.c" in started.store["tables"]


def test_a_removed_table_is_not_a_change() -> None:
    assert plan(pipeline("    - public.a"), written_by(pipeline()), LOG).resnapshot == ()


def test_reordered_lists_are_not_a_change() -> None:
    before = pipeline("    - {name: public.a, ops: [c, u], columns: {exclude: [x, y]}}")
    now = pipeline("    - {name: public.a, ops: [u, c], columns: {exclude: [y, x]}}")
    assert plan(now, written_by(before), LOG).resnapshot == ()


def test_equal_spellings_are_not_a_change() -> None:
    before = pipeline("    - {name: public.a, mask: {n: null, m: redact}}")
    now = pipeline("    - {name: public.a, mask: {m: {type: redact}, n: 'null'}}")
    assert plan(now, written_by(before), LOG).resnapshot == ()


def test_changed_mask_key_is_noticed_through_the_key_check() -> None:
    before = pipeline(HASHED, key=KEY_A)
    with pytest.raises(TransformsChanged) as info:
        plan(pipeline(HASHED, key=KEY_B), written_by(before), LOG)
    message = info.value.problems[0][1]
    assert "source.mask_key" in message
    assert KEY_A not in message and KEY_B not in message
    started = plan(pipeline(HASHED, policy="resnapshot", key=KEY_B), written_by(before), LOG)
    assert started.resnapshot == ("public.a",)  # b hashes nothing: its records stay right


def test_same_mask_key_is_no_change() -> None:
    p = pipeline(HASHED, key=KEY_A)
    assert plan(pipeline(HASHED, key=KEY_A), written_by(p), LOG).resnapshot == ()


def test_a_key_given_with_the_first_hash_mask_names_the_table_not_the_key() -> None:
    started = plan(pipeline(HASHED, policy="resnapshot", key=KEY_A), written_by(pipeline()), LOG)
    assert started.resnapshot == ("public.a",)


def test_log_from_before_fingerprints_without_filters_now() -> None:
    legacy = {"slot": {"lsn": 42}}  # offsets of a version that stored no fingerprint
    p = pipeline()
    started = plan(p, legacy, LOG)
    assert started.resnapshot == ()
    assert started.store == fingerprints.current(p)


def test_log_from_before_fingerprints_with_filters_now() -> None:
    legacy = {"slot": {"lsn": 42}}
    with pytest.raises(TransformsChanged) as info:
        plan(pipeline(FILTERED), legacy, LOG)
    assert "public.a" in info.value.problems[0][1]
    started = plan(pipeline(FILTERED, policy="resnapshot"), legacy, LOG)
    assert started.resnapshot == ("public.a",)


def test_log_from_before_fingerprints_with_transforms_now() -> None:
    legacy = {"slot": {"lsn": 42}}
    with pytest.raises(TransformsChanged, match="the transforms"):
        plan(pipeline(top=ADD), legacy, LOG)
    started = plan(pipeline(top=ADD, policy="resnapshot"), legacy, LOG)
    assert started.resnapshot == ("public.a", "public.b")


def test_everything_changed_is_named_together() -> None:
    before = pipeline(HASHED, key=KEY_A)
    now = pipeline(
        "    - {name: public.a, mask: {email: hash}, ops: [c]}\n    - public.b", ADD, key=KEY_B
    )
    with pytest.raises(TransformsChanged) as info:
        plan(now, written_by(before), LOG)
    message = info.value.problems[0][1]
    for part in ("the transforms", "source.mask_key", "public.a"):
        assert part in message


def test_the_message_reads_well() -> None:
    with pytest.raises(TransformsChanged) as info:
        plan(pipeline(top=ADD), written_by(pipeline()), LOG)
    assert "other the" not in info.value.problems[0][1]


# -- the mask key's check --------------------------------------------------------------------


@pytest.mark.parametrize("key", [KEY_A, KEY_B, "x" * 16, "0123456789abcdef" * 4])
def test_key_check_never_equals_or_contains_the_key(key: str) -> None:
    check = key_check(key.encode())
    assert check is not None
    assert check != key
    assert key not in check and check not in key
    assert key.encode().hex() not in check
    assert len(check) == 16


def test_key_check_is_stable_and_tells_keys_apart() -> None:
    assert key_check(KEY_A.encode()) == key_check(KEY_A.encode())
    assert key_check(KEY_A.encode()) != key_check(KEY_B.encode())
    assert key_check(None) is None


def test_key_check_is_not_a_plain_hash_of_the_key() -> None:
    import hashlib

    check = key_check(KEY_A.encode())
    for digest in (hashlib.sha256, hashlib.md5, hashlib.sha1):
        assert check is not None and check not in digest(KEY_A.encode()).hexdigest()
