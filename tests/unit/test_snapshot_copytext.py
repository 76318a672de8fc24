"""COPY text-format rows split into values, without a server."""

from __future__ import annotations

from connectors.postgres.types.copytext import split_block, split_row, unescape


def test_plain_rows_split_on_tabs() -> None:
    assert split_row("1\tabc\t2.5") == ("1", "abc", "2.5")


def test_null_and_escapes() -> None:
    assert split_row("1\t\\N\ta\\tb\\nc\\\\d") == ("1", None, "a\tb\nc\\d")


def test_octal_hex_and_other_escapes() -> None:
    assert unescape("\\001\\x02\\b\\f\\r\\v") == "\x01\x02\b\f\r\v"
    assert unescape("\\N") is None
    assert unescape("x\\yz") == "xyz"  # an unknown escape stands for the character itself


def test_empty_string_is_not_null() -> None:
    assert split_row("\t") == ("", "")


def test_blocks_of_lines() -> None:
    assert split_block("1\ta\n2\t\\N\n") == [("1", "a"), ("2", None)]
