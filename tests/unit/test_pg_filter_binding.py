"""A table filter bound to its table's columns by ``attnum`` (no server: the binding and the
resolution are pure functions of the catalog's rows).

Live columns of the table in these tests: ``id`` (1), ``name`` (2), ``ssn`` (3, masked),
``password_hash`` (4, left out).
"""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from cdc.contracts.errors import SourceMisconfigured
from cdc.contracts.schema import Column, TableSchema
from cdc.transforms.filters import TableEntry
from connectors.postgres.assembly.evolution import Attribute, column_ids
from connectors.postgres.publication.filters import TableFilter, _compiled

LIVE = [(1, "id"), (2, "name"), (3, "ssn"), (4, "password_hash")]
ENTRY: dict[str, Any] = {
    "name": "public.users",
    "columns": {"exclude": ["password_hash"]},
    "mask": {"ssn": "redact"},
}


class _Logger:
    """Collects warnings (structlog's capture works on the global logger only)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))


def bound(
    live: list[tuple[int, str]] = LIVE,
    published: dict[str, int] | None = None,
    omits_excluded: bool = False,
) -> tuple[TableFilter, _Logger]:
    logger = _Logger()
    found = _compiled(TableEntry.model_validate(ENTRY), None)
    return found.bind(live, logger, published, omits_excluded), logger  # type: ignore[arg-type]


def shape(found: TableFilter, names: list[str], ids: list[int | None]) -> dict[str, str]:
    """Each column that leaves the source: ``mask`` kind, or ``plain``."""
    resolved = found.resolve(names, ids, ("id",))
    return {
        names[n]: (resolved.masks[names[n]].kind if names[n] in resolved.masks else "plain")
        for n in resolved.kept
    }


def test_a_rename_keeps_the_mask_and_the_exclusion_by_attnum() -> None:
    found, logger = bound()
    renamed = ["id", "name", "ssn2", "pwh2"]
    assert shape(found, renamed, [1, 2, 3, 4]) == {"id": "plain", "name": "plain", "ssn2": "redact"}
    assert [f["was"] for e, f in logger.events if e == "filter.column_renamed"] == [
        "ssn",
        "password_hash",
    ]
    shape(found, renamed, [1, 2, 3, 4])  # reported once, not for every Relation or chunk
    assert len(logger.events) == 2


def test_a_column_renamed_to_a_masked_name_is_masked_too() -> None:
    found, _ = bound()
    names = ["id", "ssn", "x", "password_hash", "name"]
    assert shape(found, names, [1, 2, 3, 4, 5]) == {
        "id": "plain",
        "ssn": "redact",  # was name: masked by its new name
        "x": "redact",  # was ssn: masked by its attnum
        "name": "plain",  # a new column
    }


def test_an_unbound_filter_goes_by_name_as_before() -> None:
    found = _compiled(TableEntry.model_validate(ENTRY), None)
    assert shape(found, ["id", "ssn2", "pwh2"], [1, 3, 4]) == {
        "id": "plain",
        "ssn2": "plain",
        "pwh2": "plain",
    }


def test_a_column_of_unknown_attnum_is_left_out_while_a_hidden_one_is_missing() -> None:
    found, logger = bound()
    # The stream is behind later DDL: the catalog knows neither old name any more.
    assert shape(found, ["id", "name", "ssn", "password_hash"], [1, 2, None, None]) == {
        "id": "plain",
        "name": "plain",
        "ssn": "redact",  # hidden by its name anyway
    }
    assert shape(found, ["id", "name", "old"], [1, 2, None]) == {"id": "plain", "name": "plain"}
    assert ("filter.column_left_out", "old") in [(e, f.get("column")) for e, f in logger.events]
    # Every hidden column found by attnum: an unknown one is not suspect.
    names = ["id", "name", "ssn", "password_hash", "new"]
    assert "new" in shape(found, names, [1, 2, 3, 4, None])


def test_a_hidden_name_the_table_does_not_have_stops_the_binding() -> None:
    with pytest.raises(SourceMisconfigured) as raised:
        bound([(1, "id"), (2, "name"), (3, "ssn2"), (4, "password_hash")])
    assert "masks or leaves out ssn, which the table does not have" in str(raised.value)
    assert "on_transform_change: continue" in str(raised.value)


def test_a_masked_column_renamed_while_stopped_is_found_by_its_published_attnum() -> None:
    live = [(1, "id"), (2, "name"), (3, "ssn2"), (4, "password_hash"), (5, "ssn")]
    found, logger = bound(live, {"id": 1, "name": 2, "ssn": 3})
    assert shape(found, [n for _, n in live], [i for i, _ in live]) == {
        "id": "plain",
        "name": "plain",
        "ssn2": "redact",
        "ssn": "redact",
    }
    assert [f["column"] for e, f in logger.events if e == "filter.column_renamed"] == ["ssn2"]


def test_a_left_out_name_taken_by_a_new_column_stops_the_binding() -> None:
    live = [(1, "id"), (2, "name"), (3, "ssn"), (4, "pwh2"), (5, "password_hash")]
    with pytest.raises(SourceMisconfigured) as raised:
        bound(live, {"id": 1, "name": 2, "ssn": 3})
    assert "pwh2, never published, may be the column it left out" in str(raised.value)
    # Without a rename the left-out column is simply newer than every published one.
    assert bound(LIVE, {"id": 1, "name": 2, "ssn": 3})[0].hidden == {
        3: "ssn",
        4: "password_hash",
    }


def test_a_name_that_differs_only_by_case_is_reported() -> None:
    _, logger = bound([*LIVE, (5, "SSN"), (6, "Password_Hash")])
    assert [(f["column"], f["like"]) for e, f in logger.events if e == "filter.case_twin"] == [
        ("SSN", "ssn"),
        ("Password_Hash", "password_hash"),
    ]


def test_capture_logs_is_not_needed_for_an_unbound_filter() -> None:
    with capture_logs() as logs:
        found = _compiled(TableEntry.model_validate(ENTRY), None)
        found.resolve(["id", "SSN"], [1, 2])
    assert logs == []


def relation_ids(
    names: list[str], catalog: list[tuple[int, str]], before: list[str]
) -> list[int | None]:
    """The ids the stream gives a ``Relation`` message's ``names`` with the catalog as it is
    now and the shape published before (``before``: names of LIVE)."""
    previous = TableSchema(
        "postgresql",
        "public",
        "users",
        tuple(Column(n, "text", id=i) for i, n in LIVE if n in before),
        0,
    )
    return column_ids(names, [Attribute(i, n) for i, n in catalog], previous)


def test_a_masked_column_behind_two_renames_is_not_streamed_raw() -> None:
    found, logger = bound()
    # RENAME ssn TO ssn2; RENAME ssn2 TO x; ADD ssn2, while the stream lags: the Relation
    # message of the WAL in between calls attnum 3 ssn2, which the catalog gives attnum 5.
    catalog = [(1, "id"), (2, "name"), (3, "x"), (4, "password_hash"), (5, "ssn2")]
    names = ["id", "name", "ssn2", "password_hash"]
    ids = relation_ids(names, catalog, ["id", "name", "ssn"])
    assert ids[2] == 5
    assert shape(found, names, ids) == {"id": "plain", "name": "plain"}
    assert ("filter.column_left_out", "ssn2") in [(e, f.get("column")) for e, f in logger.events]
    # Caught up: the masked column is found by its attnum, and the new ssn2 is new indeed.
    names = ["id", "name", "x", "password_hash", "ssn2"]
    assert shape(found, names, relation_ids(names, catalog, names)) == {
        "id": "plain",
        "name": "plain",
        "x": "redact",
        "ssn2": "plain",
    }


@pytest.mark.parametrize("omits_excluded", [False, True])
def test_a_left_out_column_behind_two_renames_is_not_streamed(omits_excluded: bool) -> None:
    found, _ = bound(omits_excluded=omits_excluded)
    # RENAME password_hash TO pwh2; RENAME pwh2 TO x; ADD pwh2, while the stream lags.
    catalog = [(1, "id"), (2, "name"), (3, "ssn"), (4, "x"), (5, "pwh2")]
    names = ["id", "name", "ssn", "pwh2"]
    expected = {"id": "plain", "name": "plain", "ssn": "redact"}
    if omits_excluded:
        # PostgreSQL 15's column list leaves attnum 4 out whatever it is called: the server
        # cannot send it, so pwh2 is the new column.
        expected["pwh2"] = "plain"
    # Else (PostgreSQL 14 sends every column) pwh2 in this stretch of WAL is password_hash.
    assert shape(found, names, relation_ids(names, catalog, ["id", "name", "ssn"])) == expected


def test_a_column_added_while_nothing_hidden_is_lost_is_kept() -> None:
    found, _ = bound(omits_excluded=True)
    # The column list leaves password_hash out: its absence is no doubt.
    assert shape(found, ["id", "name", "ssn", "w"], [1, 2, 3, 5]) == {
        "id": "plain",
        "name": "plain",
        "ssn": "redact",
        "w": "plain",
    }
    found, _ = bound()
    names = ["id", "name", "ssn", "password_hash", "w"]
    assert "w" in shape(found, names, [1, 2, 3, 4, 5])
