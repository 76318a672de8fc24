"""The matrix test's tables (``tests/e2e/test_matrix.py``): the differential workload's columns
and rows (``tests/debezium/workload.py``), as nullable and NOT NULL tables, and their changes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.debezium import workload


@dataclass(frozen=True)
class Table:
    """One table of the matrix: its columns, key, rows and streamed transactions.

    Statements are ``psycopg.sql`` templates with ``{}`` for the table's name.
    """

    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    not_null: bool
    full: bool
    rows: tuple[str, ...]
    steps: tuple[tuple[str, ...], ...]

    @property
    def types(self) -> dict[str, str]:
        return dict(self.columns)

    def create(self) -> str:
        suffix = " NOT NULL" if self.not_null else ""
        columns = ", ".join(
            f"{n} {t}{' NOT NULL' if n in self.key else suffix}" for n, t in self.columns
        )
        return f"CREATE TABLE {{}} ({columns}, PRIMARY KEY ({', '.join(self.key)}))"


def parse_columns(text: str) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """``(name, type)`` of a workload's column list, and its primary key."""
    body, _, clause = text.partition("PRIMARY KEY (")
    parts = [p.strip() for p in re.split(r",(?![^()]*\))", body) if p.strip()]
    columns, key = [], [k.strip() for k in clause.split(")")[0].split(",") if k.strip()]
    for part in parts:
        name, _, rest = part.partition(" ")
        if "PRIMARY KEY" in rest:
            key.append(name)
        kind = rest.replace("NOT NULL", "").replace("PRIMARY KEY", "").strip()
        columns.append((name, kind))
    return tuple(columns), tuple(key)


def _replaced(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"the workload's rows changed: {old!r}"
    return text.replace(old, new)


def _keyed(row: str, key: str) -> str:
    return re.sub(r"^\(\d+, '\w+',", f"({key},", row)


def _template(statement: str) -> str:
    """A statement with ``<t>`` for the table as a ``psycopg.sql`` template."""
    return statement.replace("{", "{{").replace("}", "}}").replace("<t>", "{}")


# numeric(p,s) holds no NaN in DuckDB's DECIMAL(p,s): the sink refuses such a record by design
# (sinks/duckdb/types.py), so fixed-scale columns get another value here; the unconstrained
# numerics (VARCHAR in DuckDB) and the floats keep NaN.
ROW_2 = _replaced(workload.ROW_2, "\n    'NaN', 'NaN',", "\n    -9999999999.99, 'NaN',")
# ROW_4 with its two NULLs filled, for the NOT NULL tables.
ROW_4_FULL = _replaced(workload.ROW_4, "NULL, NULL,\n", "false, 'four',\n")
ROW_5 = _keyed(workload.ROW_1, "5, 'new'")
ROW_6 = _keyed(ROW_2, "6, 'tx'")


def wide(name: str, not_null: bool, full: bool, truncated: bool) -> Table:
    """A table of every column of the workload's wide tables, with their composite key."""
    columns, key = parse_columns(workload.COLUMNS)
    row_4 = ROW_4_FULL if not_null else workload.ROW_4
    rows = [workload.ROW_1, ROW_2, row_4] + ([] if not_null else [workload.ROW_3])
    return Table(
        name,
        columns,
        key,
        not_null,
        full,
        tuple(_template(r) for r in rows),
        tuple(
            tuple(_template(s) for s in step) for step in _wide_steps(row_4, not_null, truncated)
        ),
    )


def _wide_steps(row_4: str, not_null: bool, truncated: bool) -> list[list[str]]:
    update = workload.STREAM[1].replace("{t}", "<t>").replace("WHERE id = 3", "WHERE id = 4")
    steps = [
        [f"INSERT INTO <t> VALUES {ROW_5}"],
        [update],
        ["UPDATE <t> SET region = 'eu2' WHERE id = 1"],  # the primary key changes
        ["UPDATE <t> SET c_int2 = 7 WHERE id = 2"],  # c_toast (TOASTed) is unchanged
        ["DELETE FROM <t> WHERE id = 4"],
        [
            f"INSERT INTO <t> VALUES {ROW_6}",
            "UPDATE <t> SET c_text = 'in a transaction' WHERE id = 6",
            "DELETE FROM <t> WHERE id = 5",
            "UPDATE <t> SET c_jsonb = '{\"z\": [1, 2]}' WHERE id = 2",
        ],
    ]
    if not not_null:
        steps += [
            ["UPDATE <t> SET c_int4 = 1, c_text = 'was null' WHERE id = 3"],
            ["UPDATE <t> SET c_numeric = NULL, c_timestamptz = NULL, c_bytea = NULL WHERE id = 6"],
        ]
    if truncated:
        steps += [
            ["TRUNCATE <t>"],
            [f"INSERT INTO <t> VALUES {workload.ROW_1}, {ROW_2}, {row_4}"],
            ["UPDATE <t> SET c_text = 'after the truncate' WHERE id = 4"],
            ["DELETE FROM <t> WHERE id = 1"],
        ]
    return steps


def values(name: str) -> Table:
    """The workload's values table (every form of numeric and timestamptz(p), a single-column
    key, its own changes and truncate)."""
    columns, key = parse_columns(workload.VALUES_COLUMNS)
    own = workload.VALUES_TABLE
    # numeric(12,4) in DuckDB is DECIMAL(12,4): no NaN (see ROW_2 above).
    rows = [r.replace(", 1.0 / 3, 'NaN',", ", 1.0 / 3, 0,") for r in workload.VALUES_ROWS]
    assert rows != list(workload.VALUES_ROWS), "the workload's values rows changed"
    stream = [s.replace(own, "<t>") for s in workload.VALUES_STREAM]
    # Its stream ends in a truncate and one row: the snapshot's rows and the stream's inserts
    # before the truncate again, so every value form is in the state the sinks are compared in.
    cut = next(i for i, s in enumerate(stream) if s.startswith("TRUNCATE"))
    again = [f"INSERT INTO <t> VALUES {r}" for r in rows]
    again += [s for s in stream[:cut] if s.startswith("INSERT")]
    steps = [[s] for s in stream + again]
    return Table(
        name,
        columns,
        key,
        False,
        False,
        tuple(_template(r) for r in rows),
        tuple(tuple(_template(s) for s in step) for step in steps),
    )
