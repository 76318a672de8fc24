"""Values at the edges of their type: the time 24:00:00 and arrays of more than one dimension.

PostgreSQL's ``time`` runs to 24:00:00 inclusive, which Python's ``time`` cannot hold; Debezium
writes it as a day's worth of µs or ms, or as ``"24:00:00Z"`` under ``isostring``. Every form
must decode to the same value, and ``cdc verify``'s :func:`canonical` must read it and arrays
of any depth (with NULL elements) without crashing, equal values equal, different ones not.
"""

from __future__ import annotations

import datetime as dt

import pytest

from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE, EnvelopeOptions
from cdc.records.normalize import canonical
from cdc.records.values import decode

CONNECT = DEBEZIUM_DEFAULTS.model_copy(update={"time_precision_mode": "connect"})


@pytest.mark.parametrize(
    ("value", "type_name", "options"),
    [
        (86_400_000_000, "time", DEBEZIUM_DEFAULTS),  # µs since midnight (adaptive, p > 3)
        (86_400_000, "time(3)", DEBEZIUM_DEFAULTS),  # ms since midnight (adaptive, p <= 3)
        (86_400_000, "time", CONNECT),  # ms since midnight (connect)
        ("24:00:00Z", "time", READABLE),  # isostring: the Z is the encoding's
        ("24:00:00Z", "time without time zone", READABLE),
        ("24:00:00", "time", None),  # the legacy encoding: ISO without Z
        ("24:00:00", "time", READABLE),  # already decoded (a sink's text read back)
    ],
)
def test_midnight_at_the_end_of_the_day_decodes_the_same_in_every_form(
    value: object, type_name: str, options: EnvelopeOptions | None
) -> None:
    decoded = decode(value, type_name, options)
    assert decoded == "24:00:00"
    assert decode(decoded, type_name, options) == decoded  # decoding twice changes nothing


def test_other_times_are_not_mistaken_for_the_end_of_the_day() -> None:
    assert decode("00:00:00Z", "time", READABLE) == dt.time(0)
    assert decode(0, "time", DEBEZIUM_DEFAULTS) == dt.time(0)
    assert decode(86_399_999_999, "time", DEBEZIUM_DEFAULTS) == dt.time(23, 59, 59, 999_999)
    assert decode("23:59:59.999999Z", "time", READABLE) == dt.time(23, 59, 59, 999_999)


@pytest.mark.parametrize("type_name", ["time", "time without time zone", "time(3)"])
def test_canonical_reads_the_end_of_the_day(type_name: str) -> None:
    forms = ["24:00:00", "24:00:00.000000", decode("24:00:00Z", "time", READABLE)]
    forms += [decode(86_400_000_000, "time", DEBEZIUM_DEFAULTS)]
    assert {canonical(form, type_name) for form in forms} == {"24:00:00"}
    # A zone written stays a zone, as for any other time ("13:00:00Z" is "13:00:00+00:00").
    assert canonical("24:00:00Z", type_name) == "24:00:00+00:00"
    assert canonical("24:00:00", type_name) != canonical(dt.time(0), type_name)
    assert canonical("24:00:00", type_name) != canonical("23:59:59.999999", type_name)
    assert canonical(["24:00:00", None, dt.time(1)], type_name + "[]") == [
        "24:00:00",
        None,
        "01:00:00",
    ]


def test_canonical_reads_the_end_of_the_day_with_a_zone_in_utc() -> None:
    assert canonical("24:00:00+00", "timetz") == canonical("24:00:00Z", "timetz")
    # 24:00 two hours east of Greenwich is 22:00 UTC, as 22:00:00Z (Debezium's form) is.
    assert canonical("24:00:00+02", "time with time zone") == canonical("22:00:00Z", "timetz")
    assert canonical("24:00:00-12", "timetz") == canonical(dt.time(12, tzinfo=dt.UTC), "timetz")
    assert canonical("24:00:00+00", "timetz") != canonical("00:00:00+00", "timetz")


def test_canonical_reads_arrays_of_any_depth() -> None:
    grid = [[1, 2], [3, None]]
    assert canonical(grid, "integer[]") == [[1, 2], [3, None]]
    assert canonical("[[1,2],[3,null]]", "integer[]") == canonical(grid, "int4[]")
    assert canonical(["1", "2"], "integer[]") == [1, 2]
    cube = [[["1.50", None], ["2"]], [[None]]]
    assert canonical(cube, "numeric(8,3)[]") == [[["1.5", None], ["2"]], [[None]]]
    assert canonical(cube, "numeric[][][]") == canonical(
        [[["1.500", None], ["2.000"]], [[None]]], "numeric(8,3)[]"
    )
    stamps = [[dt.datetime(2024, 1, 2, 4, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=1)))]]
    assert canonical(stamps, "timestamptz[]") == canonical(
        [["2024-01-02T03:04:05Z"]], "timestamp with time zone[]"
    )


def test_canonical_tells_arrays_of_different_values_or_shapes_apart() -> None:
    assert canonical([[1, 2], [3, 4]], "integer[]") != canonical([[1, 2], [3, 5]], "integer[]")
    assert canonical([[1, 2], [3, 4]], "integer[]") != canonical([1, 2, 3, 4], "integer[]")
    assert canonical([[1, 2]], "integer[]") != canonical([[1, None]], "integer[]")
    assert canonical([[None]], "integer[]") != canonical([None], "integer[]")
    assert canonical([], "integer[]") == canonical("[]", "integer[]") == []


def test_a_json_array_element_that_is_a_list_stays_one_document() -> None:
    # A sink may hand a jsonb[] back parsed: its element [1, 2] is a document, not a dimension.
    assert canonical([[1, 2], None], "jsonb[]") == canonical(["[1, 2]", None], "jsonb[]")
    assert canonical([[1, 2]], "json[]") == ["[1,2]"]
