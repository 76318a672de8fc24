"""Config errors that used to pass: an unclosed ``${VAR``, a DSN or URL its driver cannot parse
(reported at ``cdc validate``, with its YAML path and without its secrets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc.config.pipeline import expand_env, parse
from cdc.contracts.errors import ConfigError
from tests.e2e.cli_helpers import cdc

PIPELINE = """
version: 1
name: shop
source:
  type: postgres
  dsn: {dsn}
  tables: [public.orders]
sinks:
  - name: cache
    type: redis
    url: {url}
"""


def problems_of(dsn: str, url: str = "redis://127.0.0.1:6379/0", **env: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse(PIPELINE.format(dsn=dsn, url=url), env)
    return dict(info.value.problems)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("${PG_DSN", "${PG_DSN has no closing brace"),
        ("postgresql://u@h/${DB", "${DB has no closing brace"),
        ("${PG_DSN:default}", "${PG_DSN... is not a valid reference"),
        ("${1DSN}", "${... is not a valid reference"),
        ("${PG_DSN}${", "${ has no closing brace"),
    ],
)
def test_a_bad_reference_is_an_error_with_its_path(value: str, message: str) -> None:
    problems = problems_of(value, PG_DSN="host=h", DB="shop")
    assert message in problems["source.dsn"]


def test_a_bad_reference_never_quotes_what_follows_the_name() -> None:
    _, problems = expand_env({"dsn": "password=ab${cd:Zq9s3cr3t"}, {})
    assert problems == [("dsn", "${cd has no closing brace: write ${NAME} or ${NAME:-default}")]


def test_expanded_values_are_not_read_as_references() -> None:
    expanded, problems = expand_env({"dsn": "${A}", "b": "${B:-x${}"}, {"A": "pw=${x"})
    assert expanded == {"dsn": "pw=${x", "b": "x${"}
    assert problems == []


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://u:Zq9s3cr3t%zz@h/db",
        "host=h password=Zq9 s3cr3t",
        "postgresql://u@h/db?password=Zq9s3cr3t&s3cr3t",
    ],
)
def test_a_dsn_libpq_cannot_parse_is_a_config_error_without_its_secret(dsn: str) -> None:
    problems = problems_of(f"'{dsn}'")
    assert "not a valid libpq connection string" in problems["source.dsn"]
    assert "s3cr3t" not in str(problems) and "Zq9" not in str(problems)


def test_a_redis_url_redis_py_cannot_parse_is_a_config_error() -> None:
    problems = problems_of("host=h", url="'redis://:Zq9s3cr3t@h:port/0?password=Zq9s3cr3t'")
    assert "Port" in problems["sinks[0].url"]
    assert "Zq9s3cr3t" not in str(problems)


def test_cdc_validate_rejects_an_unclosed_reference(tmp_path: Path) -> None:
    path = tmp_path / "shop.yaml"
    path.write_text(PIPELINE.format(dsn="${PG_DSN", url="redis://127.0.0.1:6379/0"))
    result = cdc("validate", str(path), cwd=tmp_path, env={"PG_DSN": "host=h"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "source.dsn: ${PG_DSN has no closing brace" in result.stderr
