"""The DBLog window, fed by hand in stream order."""

from __future__ import annotations

import pytest

from snapshots.watermark import Watermarks, parse, render

ROWS = {b"1": "row1", b"2": "row2", b"3": "row3"}


def window() -> Watermarks[str]:
    marks: Watermarks[str] = Watermarks()
    marks.expect("w1", "public.t")
    return marks


def test_rows_changed_inside_the_window_are_dropped() -> None:
    marks = window()
    marks.observe("public.t", b"1")  # before the low watermark: older than the read
    assert marks.low("w1")
    marks.observe("public.t", b"2")
    marks.observe("public.other", b"3")  # another table does not count
    marks.deliver("w1", ROWS)
    assert marks.high("w1") == ("public.t", ["row1", "row3"])
    assert len(marks) == 0


def test_changes_after_the_high_watermark_do_not_count() -> None:
    marks = window()
    marks.low("w1")
    marks.deliver("w1", ROWS)
    closed = marks.high("w1")
    marks.observe("public.t", b"1")
    assert closed == ("public.t", ["row1", "row2", "row3"])


def test_a_truncate_inside_the_window_drops_every_row() -> None:
    marks = window()
    marks.low("w1")
    marks.observe_truncate("public.t")
    marks.deliver("w1", ROWS)
    assert marks.high("w1") == ("public.t", [])


def test_stale_and_unopened_watermarks_are_ignored() -> None:
    marks = window()
    assert not marks.low("unknown")
    assert marks.high("unknown") is None
    marks.deliver("w1", ROWS)
    assert marks.high("w1") is None  # its low watermark never went by


def test_abandoned_windows_are_forgotten() -> None:
    marks = window()
    marks.abandon("w1")
    assert not marks.low("w1")


def test_a_window_closed_before_its_rows_is_a_bug() -> None:
    marks = window()
    marks.low("w1")
    with pytest.raises(RuntimeError):
        marks.high("w1")


def test_message_content_round_trip() -> None:
    assert parse(render("low", "abc").encode()) == ("low", "abc")
    assert parse(b"high:x") == ("high", "x")
    assert parse(b"other:x") is None
    assert parse(b"low:") is None
