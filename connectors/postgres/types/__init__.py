"""Convert PostgreSQL text-format values into faithful, JSON-ready Python values.

pgoutput sends column values in their text output form. This module maps each type to a pure
``str -> value`` function whose result orjson serialises without losing anything:

================================  ==============================================================
integers, ``oid``                 ``int``
``numeric``, ``money``            ``str``: the exact text (``'NaN'``, ``'Infinity'`` too), as
                                  Debezium's ``decimal.handling.mode=string``
``float4``, ``float8``            ``float``; ``'NaN'``, ``'Infinity'``, ``'-Infinity'`` stay
                                  strings (JSON has no such numbers)
``bool``                          ``bool``
``bytea``                         base64 ``str``
``date``, ``time``                ISO text as sent (``'infinity'``, ``BC`` dates kept as text)
``timetz``                        ``'HH:MM:SS[.ffffff]+HH:MM'``
``timestamp``                     ``'YYYY-MM-DDTHH:MM:SS[.ffffff]'`` (fraction as sent)
``timestamptz``                   the same in UTC with ``'Z'``
``interval``                      ISO-8601 duration, see :func:`interval_to_iso`
``json``, ``jsonb``               parsed; see :func:`parse_json` for big numbers
arrays                            nested lists of converted elements, ``NULL`` -> ``None``
domains                           converted as their base type
anything else                     the text as sent (enums, uuid, inet, ranges, composites...)
================================  ==============================================================

The parsers expect the text forms of these settings, which the replication connection should
set (see :data:`TEXT_FORMAT_SETTINGS`); anything else is a :class:`ConversionError`.

The modules: :mod:`.oids` (the catalog: built-in OIDs, :class:`TypeEntry`, :data:`TYPE_QUERY`),
:mod:`.scalars` (the text-format converters and the kind of each), :mod:`.arrays` (array
text), :mod:`.names` (``format_type`` spellings), :mod:`.registry` (OID -> entry, converter and
:class:`TypeKind`), :mod:`.rows` (the per-relation row converter), :mod:`.errors`.
"""

from __future__ import annotations

from connectors.postgres.types.errors import ConversionError
from connectors.postgres.types.kinds import TypeKind
from connectors.postgres.types.modes import CONVERTER_KINDS, converter_kind
from connectors.postgres.types.names import type_name
from connectors.postgres.types.oids import TYPE_QUERY, TypeEntry
from connectors.postgres.types.registry import TypeRegistry
from connectors.postgres.types.rows import row_converter
from connectors.postgres.types.scalars import (
    TEXT_FORMAT_SETTINGS,
    Converter,
    interval_to_iso,
    parse_json,
)

__all__ = [
    "CONVERTER_KINDS",
    "TEXT_FORMAT_SETTINGS",
    "TYPE_QUERY",
    "ConversionError",
    "Converter",
    "TypeEntry",
    "TypeKind",
    "TypeRegistry",
    "converter_kind",
    "interval_to_iso",
    "parse_json",
    "row_converter",
    "type_name",
]
