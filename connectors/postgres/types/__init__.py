"""PostgreSQL values: their text form converted into the JSON-ready values Debezium 3.6.1 writes,
and the row encoder (a Python reference and an optional Rust one) that writes rows of them.

pgoutput sends column values in their text output form. Each column gets one ``str -> value``
function, chosen by its type, typmod and the pipeline's envelope options
(:class:`~cdc.envelope.options.EnvelopeOptions`, :mod:`.modes`); under the readable defaults:

================================  ==============================================================
integers, ``oid``                 ``int``
``numeric``                       ``str``: the exact text, ``NaN`` as ``'NAN'`` (``precise``:
                                  Connect's Decimal; ``double``: a number)
``money``                         ``str``: the plain decimal (``'1234.56'``)
``float4``, ``float8``            ``float``; ``'NaN'``, ``'Infinity'``, ``'-Infinity'`` stay
                                  strings (JSON has no such numbers)
``bool``                          ``bool``
``bytea``                         base64 ``str`` (or URL-safe base64, or hex)
``date``, ``time``                ``'2024-02-29Z'``, ``'13:45:30.5Z'`` (or epoch numbers)
``timetz``                        UTC, fraction trimmed: ``'11:45:30.5Z'`` (every mode)
``timestamp``                     ``'YYYY-MM-DDTHH:MM:SS[.ffffff]Z'`` (or epoch ms/µs)
``timestamptz(p)``                UTC, ``p`` fraction digits (6 without a ``p``), ``'Z'``
infinity, BC                      what Debezium streams: ``date`` ``'-5877611-06-21Z'`` (its
                                  sentinel), ``timestamp`` ``'+294247-01-10T04:00:25.2Z'``
                                  (pgjdbc's, as µs), ``timestamptz`` ``'infinity'``; BC is
                                  the proleptic year (``'-0043-03-15Z'``)
``interval``                      ``'P1Y2M3DT4H5M6.789S'`` (or µs, a month 30.4375 days)
``json``, ``jsonb``               a string holding the server's text (``io.debezium.data.Json``)
``hstore``                        a JSON text (or the object, ``hstore.handling.mode=map``),
                                  keys in Java's ``HashMap`` order, as Debezium's
arrays                            lists of converted elements, ``NULL`` -> ``None`` (nested
                                  arrays keep their values, unlike Debezium)
domains                           converted as their base type (with the domain's typmod)
anything else                     the text as sent (enums, uuid, inet, ranges, composites...)
================================  ==============================================================

:mod:`.connect` gives each column's Kafka Connect field schema.

The parsers expect the text forms of these settings, which the replication connection should
set (see :data:`TEXT_FORMAT_SETTINGS`); anything else is a :class:`ConversionError`.

The modules: :mod:`.oids` (the catalog: built-in OIDs, :class:`TypeEntry`, :data:`TYPE_QUERY`),
:mod:`.scalars` (the converters that are the same in every mode), :mod:`.modes` (the choice per
column and options, and the kind of each converter), :mod:`.temporal`, :mod:`.decimals`,
:mod:`.hstore`, :mod:`.arrays` (array text), :mod:`.connect` (Connect field schemas),
:mod:`.names` (``format_type`` spellings), :mod:`.registry` (OID -> entry, converter and
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
