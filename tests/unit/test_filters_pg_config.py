"""The PostgreSQL source's checks of ``source.tables`` filters, with their YAML paths."""

from __future__ import annotations

from typing import Any

import pytest

from cdc.config.pipeline import parse
from cdc.contracts.errors import ConfigError

KEY = "0123456789abcdef0123"


def problems(tables: str, **source: Any) -> dict[str, str]:
    extra = "".join(f"\n  {k}: {v}" for k, v in source.items())
    text = (
        "version: 1\nname: p\nsource:\n  type: postgres\n  dsn: host=db\n"
        f"  mask_key: {KEY}\n  tables:\n{tables}{extra}\n"
    )
    with pytest.raises(ConfigError) as info:
        parse(text, env={})
    return dict(info.value.problems)


def test_a_row_filter_is_sql_text() -> None:
    found = problems("    - {name: public.t, where: {tenant: 42}}")
    assert "SQL expression" in found["source.tables"]


def test_key_columns_a_filter_leaves_out() -> None:
    found = problems(
        "    - {name: public.t, columns: {exclude: [k]}}",
        key_columns="{public.t: [k]}",
    )
    assert "key_columns of public.t" in found["source"]


def test_stream_in_progress_would_spool_raw_values() -> None:
    found = problems("    - {name: public.t, mask: {email: redact}}", stream_in_progress="true")
    assert "spools" in found["source"] and "public.t" in found["source"]
    # A row filter runs on the server: nothing raw is spooled.
    parse(
        "version: 1\nname: p\nsource:\n  type: postgres\n  dsn: host=db\n  tables:\n"
        "    - {name: public.t, where: 'id > 0'}\n  stream_in_progress: true\n",
        env={},
    )
