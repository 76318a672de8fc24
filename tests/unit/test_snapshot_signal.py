"""``cdc snapshot --where`` is checked to be one expression before anything is written."""

from __future__ import annotations

import pytest

from cdc.contracts.errors import ConfigError
from connectors.postgres.snapshot.signal import check_where_text


@pytest.mark.parametrize("where", ["id > 5", "name = 'ab'", "(a OR b) AND c IN (1, 2)"])
def test_expressions_pass(where: str) -> None:
    check_where_text(where)


@pytest.mark.parametrize(
    "where",
    ["id > 5; DROP TABLE t", "id > 5 -- x", "id /* x */ > 5", "id > 5)", "(id > 5", "'open", " "],
)
def test_non_expressions_are_refused(where: str) -> None:
    with pytest.raises(ConfigError):
        check_where_text(where)
