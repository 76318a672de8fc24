"""The public type-kind and mask-kind tables: their codes are the native encoder's, and the
registry's kinds are what the converters produce."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE
from cdc.transforms.masks import MaskType
from connectors.postgres.types import CONVERTER_KINDS, TypeKind, TypeRegistry, converter_kind
from connectors.postgres.types.kinds import MaskKind

LIB_RS = Path(__file__).parents[2] / "connectors" / "postgres" / "native" / "src" / "lib.rs"


def _native_codes(enum: str) -> dict[str, int]:
    """The codes of ``enum``'s variants in lib.rs's ``from_code``/``from_plan``, by Python name."""
    return {
        re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper(): int(code)  # IsoDate -> ISO_DATE
        for code, name in re.findall(rf"(\d+) => {enum}::(\w+)", LIB_RS.read_text())
    }


def test_codes_are_the_native_encoders() -> None:
    assert _native_codes("Kind") == {kind.name: kind.value for kind in TypeKind}


def test_mask_codes_are_the_native_encoders_and_name_the_masks() -> None:
    assert _native_codes("Mask") == {kind.name: kind.value for kind in MaskKind}
    # every cdc.masks kind but a plugin's, which only Python can call
    assert {kind.name.lower() for kind in MaskKind} == set(get_args(MaskType)) - {"plugin"}


@pytest.mark.parametrize(
    ("oid", "kind"),
    [
        (25, TypeKind.TEXT),  # text
        (1043, TypeKind.TEXT),  # varchar
        (2950, TypeKind.TEXT),  # uuid: sent as it is
        (99999, TypeKind.TEXT),  # unknown: sent as it is
        (114, TypeKind.TEXT),  # json: a string of the server's text (io.debezium.data.Json)
        (3802, TypeKind.TEXT),  # jsonb: the same
        (20, TypeKind.INT),
        (23, TypeKind.INT),
        (16, TypeKind.BOOL),
        (1184, TypeKind.TIMESTAMPTZ),
        (1114, TypeKind.ISO_TIMESTAMP),
        (1082, TypeKind.ISO_DATE),
        (1083, TypeKind.ISO_TIME),
        (1700, TypeKind.NUMERIC_STRING),  # numeric: the exact text, NaN as "NAN"
        (701, TypeKind.PYTHON),  # float8
        (1266, TypeKind.PYTHON),  # timetz
        (1186, TypeKind.PYTHON),  # interval
        (17, TypeKind.PYTHON),  # bytea
        (1007, TypeKind.PYTHON),  # int4[]: the array parser
    ],
)
def test_registry_kind_under_the_readable_defaults(oid: int, kind: TypeKind) -> None:
    assert TypeRegistry(READABLE).kind(oid) is kind


@pytest.mark.parametrize(
    ("oid", "typmod", "kind"),
    [
        (1184, -1, TypeKind.TIMESTAMPTZ),  # the same in every mode
        (25, -1, TypeKind.TEXT),
        (3802, -1, TypeKind.TEXT),
        (1114, -1, TypeKind.PYTHON),  # epoch µs
        (1114, 3, TypeKind.PYTHON),  # epoch ms
        (1082, -1, TypeKind.PYTHON),  # epoch days
        (1083, -1, TypeKind.PYTHON),
        (1700, -1, TypeKind.PYTHON),  # VariableScaleDecimal
        (1700, (12 << 16 | 2) + 4, TypeKind.PYTHON),  # Decimal
    ],
)
def test_registry_kind_under_debeziums_defaults(oid: int, typmod: int, kind: TypeKind) -> None:
    assert TypeRegistry(DEBEZIUM_DEFAULTS).kind(oid, typmod) is kind


def test_domain_has_its_base_kind() -> None:
    registry = TypeRegistry()
    registry.add_rows([(90001, "positive", "d", 0, 20, ",", "N", "public")])
    registry.add_rows([(90002, "doc", "d", 0, 1082, ",", "D", "public")])
    assert registry.kind(90001) is TypeKind.INT
    assert registry.kind(90002) is TypeKind.ISO_DATE


def test_converter_kind_is_the_table_or_python() -> None:
    registry = TypeRegistry()
    for oid in (20, 16, 1184, 25):
        convert = registry.raw_converter(oid)
        assert converter_kind(convert) is CONVERTER_KINDS[convert]
    assert converter_kind(registry.raw_converter(1007)) is TypeKind.PYTHON
    assert converter_kind(str.upper) is TypeKind.PYTHON
