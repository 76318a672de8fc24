"""A snapshot piece's record positions (connectors/postgres/snapshot/rows.py): written without a
Python call a row, byte for byte what the record template writes."""

from __future__ import annotations

from itertools import islice

import pytest

from cdc.contracts.events import Op, SourceInfo
from cdc.envelope.template import RecordTemplate
from connectors.postgres.snapshot.rows import SEQUENCE_SHIFT, positions


@pytest.mark.parametrize("position", [0, 32_450_343, 2**63 - 1])
def test_positions_are_the_templates_own(position: int) -> None:
    source = SourceInfo("postgresql", "db", "public", "t", 1, position, 0, "true", 7)
    template = RecordTemplate.of(Op.READ, source, "shop")
    first = (3 << SEQUENCE_SHIFT) + 4_998
    written = list(islice(positions(template, first), 5))
    assert written == [template.pos(s) for s in range(first, first + 5)]


def test_a_percent_sign_in_a_position_is_written_as_is() -> None:
    source = SourceInfo("postgresql", "db", "public", "t", 1, 5, 0, "true", 7)
    template = RecordTemplate.of(Op.READ, source, "shop")._replace(position=b'"5%d%%"')
    assert next(positions(template, 9)) == template.pos(9) == b'["5%d%%",9]'
