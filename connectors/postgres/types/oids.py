"""The catalog of types: the built-in OIDs and their entries, and user types read from
``pg_type`` with :data:`TYPE_QUERY`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["BUILTINS", "TYPE_QUERY", "TypeEntry", "entry_from_row"]

TYPE_QUERY: Final = """\
WITH RECURSIVE wanted(oid) AS (
    SELECT unnest(%s::pg_catalog.oid[])
  UNION
    SELECT dep.oid
    FROM wanted AS w
    JOIN pg_catalog.pg_type AS t ON t.oid = w.oid
    CROSS JOIN LATERAL (VALUES (t.typelem), (t.typbasetype)) AS dep(oid)
    WHERE dep.oid <> 0
)
SELECT t.oid::int8, t.typname::text, t.typtype::text, t.typelem::int8, t.typbasetype::int8,
       t.typdelim::text, t.typcategory::text, n.nspname::text,
       ARRAY(SELECT e.enumlabel::text FROM pg_catalog.pg_enum AS e
             WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder) AS labels,
       t.typtypmod::int8
FROM wanted AS w
JOIN pg_catalog.pg_type AS t ON t.oid = w.oid
JOIN pg_catalog.pg_namespace AS n ON n.oid = t.typnamespace
"""
"""Catalog rows for the given type OIDs and, recursively, their element and base types.

One parameter: a list of OIDs (``cur.execute(TYPE_QUERY, (oids,))``). Columns: ``oid, typname,
typtype, typelem, typbasetype, typdelim, typcategory, nspname, labels, typtypmod`` (``labels``:
an enum's labels in sort order, the ``allowed`` of its Connect schema; ``typtypmod``: a
domain's typmod over its base type); pass the rows (tuples or dict rows) to
:meth:`TypeRegistry.add_rows`.
"""


@dataclass(frozen=True, slots=True)
class TypeEntry:
    """What the registry knows of one type.

    Attributes:
        kind: ``'base'``, ``'array'``, ``'enum'``, ``'domain'``, ``'composite'``, ``'range'``,
            ``'multirange'`` or ``'pseudo'``.
        element_oid: the element type of an array, else 0.
        base_oid: the underlying type of a domain, else 0.
        delimiter: separates this type's values in an array's text (``;`` for ``box``).
        labels: an enum's labels, in sort order.
        typmod: a domain's typmod of its base type (``numeric(12,2)``), else -1.
    """

    oid: int
    name: str
    kind: str
    element_oid: int = 0
    base_oid: int = 0
    delimiter: str = ","
    category: str = ""
    namespace: str = "pg_catalog"
    labels: tuple[str, ...] = ()
    typmod: int = -1


_KINDS: Final = {
    "b": "base",
    "c": "composite",
    "d": "domain",
    "e": "enum",
    "p": "pseudo",
    "r": "range",
    "m": "multirange",
}


# --- built-in types (OIDs are fixed by the server version; PostgreSQL 15) ---

# oid, typname, typtype, typcategory, array type oid (from pg_type of PostgreSQL 15).
_BUILTIN_TABLE: Final = """\
16    bool            b B 1000
17    bytea           b U 1001
18    char            b Z 1002
19    name            b S 1003
20    int8            b N 1016
21    int2            b N 1005
22    int2vector      b A 1006
23    int4            b N 1007
24    regproc         b N 1008
25    text            b S 1009
26    oid             b N 1028
27    tid             b U 1010
28    xid             b U 1011
29    cid             b U 1012
30    oidvector       b A 1013
114   json            b U 199
142   xml             b U 143
600   point           b G 1017
601   lseg            b G 1018
602   path            b G 1019
603   box             b G 1020
604   polygon         b G 1027
628   line            b G 629
650   cidr            b I 651
700   float4          b N 1021
701   float8          b N 1022
718   circle          b G 719
774   macaddr8        b U 775
790   money           b N 791
829   macaddr         b U 1040
869   inet            b I 1041
1042  bpchar          b S 1014
1043  varchar         b S 1015
1082  date            b D 1182
1083  time            b D 1183
1114  timestamp       b D 1115
1184  timestamptz     b D 1185
1186  interval        b T 1187
1266  timetz          b D 1270
1560  bit             b V 1561
1562  varbit          b V 1563
1700  numeric         b N 1231
2205  regclass        b N 2210
2206  regtype         b N 2211
2249  record          p P 2287
2950  uuid            b U 2951
3220  pg_lsn          b U 3221
3614  tsvector        b U 3643
3615  tsquery         b U 3645
3802  jsonb           b U 3807
3904  int4range       r R 3905
3906  numrange        r R 3907
3908  tsrange         r R 3909
3910  tstzrange       r R 3911
3912  daterange       r R 3913
3926  int8range       r R 3927
4072  jsonpath        b U 4073
4451  int4multirange  m R 6150
4532  nummultirange   m R 6151
4533  tsmultirange    m R 6152
4534  tstzmultirange  m R 6153
4535  datemultirange  m R 6155
4536  int8multirange  m R 6157
5069  xid8            b U 271
"""


def _builtins() -> dict[int, TypeEntry]:
    entries: dict[int, TypeEntry] = {}
    for line in _BUILTIN_TABLE.splitlines():
        oid, name, typtype, category, array_oid = line.split()
        # box is the one built-in type whose arrays are not comma-separated.
        delimiter = ";" if name == "box" else ","
        entries[int(oid)] = TypeEntry(
            int(oid), name, _KINDS[typtype], delimiter=delimiter, category=category
        )
        entries[int(array_oid)] = TypeEntry(
            int(array_oid), "_" + name, "array", int(oid), category="A"
        )
    return entries


BUILTINS: Final = _builtins()
"""The built-in types and their arrays, by OID."""


def entry_from_row(row: Sequence[Any] | Mapping[str, Any]) -> TypeEntry:
    """A :class:`TypeEntry` from one :data:`TYPE_QUERY` row."""
    if isinstance(row, Mapping):
        fields = [row[k] for k in ("oid", "typname", "typtype", "typelem", "typbasetype")]
        fields += [row["typdelim"], row["typcategory"], row.get("nspname", "")]
        fields += [row.get("labels"), row.get("typtypmod")]
    else:
        fields = list(row) + [""] * (8 - len(row)) + [None] * (10 - max(8, len(row)))
    oid, name, typtype, elem, base, delim, category, namespace, labels, typmod = fields
    kind = _KINDS.get(str(typtype), "base")
    if kind == "base" and category == "A" and int(elem) != 0:
        kind = "array"
    return TypeEntry(
        int(oid),
        str(name),
        kind,
        int(elem) if kind == "array" else 0,
        int(base) if kind == "domain" else 0,
        str(delim) or ",",
        str(category),
        str(namespace),
        tuple(str(label) for label in labels or ()),
        -1 if typmod is None else int(typmod),
    )
