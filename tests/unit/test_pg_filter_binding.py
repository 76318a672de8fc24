"""A table filter bound to its table's columns by ``attnum`` (no server: the binding and the
resolution are pure functions of the catalog's rows).

Live columns of the table in these tests: ``id`` (1), ``name`` (2), ``ssn`` (3, masked),
``password_hash`` (4, left out).
"""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from cdc.errors import SourceMisconfigured
from cdc.filters import TableEntry
from connectors.postgres.filters import TableFilter, _compiled

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
    live: list[tuple[int, str]] = LIVE, published: dict[str, int] | None = None
) -> tuple[TableFilter, _Logger]:
    logger = _Logger()
    found = _compiled(TableEntry.model_validate(ENTRY), None)
    return found.bind(live, logger, published), logger  # type: ignore[arg-type]


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
    assert shape(found, ["id", "ssn", "x", "name"], [1, 2, 3, 5]) == {
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
