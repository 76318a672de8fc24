"""The public type-kind table: its codes are the native encoder's, and the registry's kinds
are what the converters produce."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from connectors.postgres.types import CONVERTER_KINDS, TypeKind, TypeRegistry, converter_kind

LIB_RS = Path(__file__).parents[2] / "connectors" / "postgres" / "native" / "src" / "lib.rs"


def test_codes_are_the_native_encoders() -> None:
    native = {
        name.upper(): int(code)
        for code, name in re.findall(r"(\d+) => Kind::(\w+),", LIB_RS.read_text())
    }
    assert native == {kind.name: kind.value for kind in TypeKind}


@pytest.mark.parametrize(
    ("oid", "kind"),
    [
        (25, TypeKind.TEXT),  # text
        (1043, TypeKind.TEXT),  # varchar
        (2950, TypeKind.TEXT),  # uuid: sent as it is
        (99999, TypeKind.TEXT),  # unknown: sent as it is
        (20, TypeKind.INT),
        (23, TypeKind.INT),
        (16, TypeKind.BOOL),
        (1184, TypeKind.TIMESTAMPTZ),
        (1114, TypeKind.TIMESTAMP),
        (1082, TypeKind.DATE),
        (1083, TypeKind.TIME),
        (3802, TypeKind.JSONB),
        (114, TypeKind.PYTHON),  # json: its text is kept as typed
        (1700, TypeKind.TEXT),  # numeric: the exact text
        (701, TypeKind.PYTHON),  # float8
        (1266, TypeKind.PYTHON),  # timetz
        (1007, TypeKind.PYTHON),  # int4[]: the array parser
    ],
)
def test_registry_kind(oid: int, kind: TypeKind) -> None:
    assert TypeRegistry().kind(oid) is kind


def test_domain_has_its_base_kind() -> None:
    registry = TypeRegistry()
    registry.add_rows([(90001, "positive", "d", 0, 20, ",", "N", "public")])
    registry.add_rows([(90002, "doc", "d", 0, 3802, ",", "U", "public")])
    assert registry.kind(90001) is TypeKind.INT
    assert registry.kind(90002) is TypeKind.JSONB


def test_converter_kind_is_the_table_or_python() -> None:
    registry = TypeRegistry()
    for oid in (20, 16, 1184, 25):
        convert = registry.raw_converter(oid)
        assert converter_kind(convert) is CONVERTER_KINDS[convert]
    assert converter_kind(registry.raw_converter(1007)) is TypeKind.PYTHON
    assert converter_kind(str.upper) is TypeKind.PYTHON
