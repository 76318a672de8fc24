"""Pipeline file validation: every error at once, each with its YAML path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cdc.config.models import EmbeddedLogConfig
from cdc.config.pipeline import expand_env, parse, redact_url
from cdc.contracts.errors import ConfigError

VALID = """
version: 1
name: shop
source:
  type: generator
  tables: [public.customers, public.orders]
  snapshot: initial
sinks:
  - name: files
    type: jsonl
    path: ${OUT_DIR:-out/files}
    tables: [public.orders]
"""


def problems_of(text: str, env: dict[str, str] | None = None) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse(text, env or {})
    return dict(info.value.problems)


def test_valid_file_parses_with_defaults() -> None:
    pipeline = parse(VALID, {})
    assert pipeline.name == "shop"
    assert isinstance(pipeline.log, EmbeddedLogConfig)
    assert pipeline.log_path() == Path(".cdc/shop")
    assert pipeline.source_tables() == [("public", "customers"), ("public", "orders")]
    sink = pipeline.sink("files")
    assert pipeline.sink_tables(sink) == [("public", "orders")]
    assert sink.path == "out/files"  # type: ignore[attr-defined]


def test_env_expansion_with_and_without_default() -> None:
    pipeline = parse(VALID, {"OUT_DIR": "/data/out"})
    assert pipeline.sink("files").path == "/data/out"  # type: ignore[attr-defined]
    expanded, problems = expand_env({"a": ["x${A}y", "${B:-b}", "${C}"]}, {"A": "1"})
    assert expanded == {"a": ["x1y", "b", ""]}
    assert problems == [("a[2]", "environment variable C is not set")]


def test_three_independent_mistakes_are_all_reported() -> None:
    text = (
        VALID.replace("name: shop", "name: Shop")
        .replace("snapshot: initial", "snapshot: sometimes")
        .replace("    tables: [public.orders]", "    tables: [public.orders]\n    colour: blue")
    )
    problems = problems_of(text)
    assert set(problems) == {"name", "source.snapshot", "sinks[0].colour"}
    assert problems["sinks[0].colour"] == "unknown key"


def test_unknown_plugin_types_name_what_is_installed() -> None:
    text = VALID.replace("type: jsonl", "type: nosuch").replace("type: generator", "type: oracle")
    problems = problems_of(text)
    assert "unknown source type 'oracle'" in problems["source.type"]
    assert "unknown sink type 'nosuch'" in problems["sinks[0].type"]
    assert "jsonl" in problems["sinks[0].type"]


def test_missing_variable_is_reported_with_its_path() -> None:
    text = VALID.replace("${OUT_DIR:-out/files}", "${OUT_DIR}")
    assert problems_of(text) == {"sinks[0].path": "environment variable OUT_DIR is not set"}


def test_cross_checks_sink_tables_and_duplicate_names() -> None:
    text = VALID.replace("tables: [public.orders]", "tables: [public.nope]") + (
        "  - name: files\n    type: jsonl\n    path: x\n"
    )
    problems = problems_of(text)
    assert "is not a source table" in problems["sinks[0].tables[0]"]
    assert "used twice" in problems["sinks[1].name"]


def test_bad_yaml_and_wrong_version() -> None:
    assert "not valid YAML" in problems_of("version: [1\n")[""]
    assert "version" in problems_of(VALID.replace("version: 1", "version: 2"))


def test_unqualified_and_duplicate_tables() -> None:
    problems = problems_of(VALID.replace("public.customers, public.orders", "a, public.orders"))
    assert "schema.table" in problems["source.tables"]


def test_redact_url_hides_passwords() -> None:
    assert redact_url("postgresql://app:s3cret@db:5432/shop") == "postgresql://app:***@db:5432/shop"
    assert redact_url("host=db password=s3cret user=app") == "host=db password=*** user=app"
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_cli_validate_exit_codes_and_no_secrets(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(VALID)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        VALID.replace("name: shop", "name: 9shop")
        .replace("snapshot: initial", "snapshot: sometimes\n  changes: -1")
        .replace("path: ${OUT_DIR:-out/files}", "path: out\n    colour: blue")
    )
    ok = subprocess.run(
        [sys.executable, "-m", "cdc.cli.main", "validate", str(good)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert "valid pipeline 'shop'" in ok.stdout
    failed = subprocess.run(
        [sys.executable, "-m", "cdc.cli.main", "validate", str(bad)], capture_output=True, text=True
    )
    assert failed.returncode == 2
    for path in ("name:", "source.snapshot:", "source.changes:", "sinks[0].colour:"):
        assert path in failed.stderr
