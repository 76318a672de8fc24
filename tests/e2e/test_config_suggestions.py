"""An unknown key in a pipeline file is answered with its YAML path and the closest key allowed
there, through ``cdc validate`` (exit 2), at every depth: the top, a plugin's section, a table
entry, a mask, a union (the log), the envelope's dotted names."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.cli_helpers import cdc

FILE = """\
version: 1
name: p1
envelope:
  time.precison.mode: isostring
source:
  type: postgres
  dsn: postgresql://cdc@127.0.0.1:1/db
  tabels: [public.t]
  tables:
    - public.t
    - name: public.u
      colums: {exclude: [a]}
      mask: {b: {type: keep_last, nn: 4}}
log:
  type: embedded
  pth: .cdc/p1
sinks:
  - name: w
    type: duckdb
    path: out/w.duckdb
    tabels: [public.t]
  - name: files
    type: jsonl
    path: out/files
    zzzzzz: 1
"""


def test_validate_suggests_the_key_meant_with_its_yaml_path(tmp_path: Path) -> None:
    path = tmp_path / "p1.yaml"
    path.write_text(FILE)
    result = cdc("validate", str(path), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = set(result.stderr.splitlines())
    assert {
        "  source.tabels: unknown key; did you mean `tables`?",
        "  source.tables[1].colums: unknown key; did you mean `columns`?",
        "  source.tables[1].mask.b.nn: unknown key; did you mean `n`?",
        "  log.pth: unknown key; did you mean `path`?",
        "  sinks[0].tabels: unknown key; did you mean `tables`?",
        "  envelope.time.precison.mode: unknown key; did you mean `time.precision.mode`?",
        "  sinks[1].zzzzzz: unknown key",  # nothing alike: no guess
    } <= lines, result.stderr
    assert f"{path}: 7 problem(s)" in lines, result.stderr
