"""What each PostgreSQL version is asked for at start (connectors.postgres.replication.versions),
and the version gate: the harness has no server older than 14, so the refusal is tested here."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from cdc.contracts.errors import SourceFatal
from cdc.contracts.source import SourceContext
from connectors.postgres import PostgresSource, PostgresSourceConfig
from connectors.postgres.replication.versions import (
    check_supported,
    major,
    protocol_version,
    stream_options,
)

# server_version_num of releases of each major version (the ones the harness downloads).
PG13, PG14, PG15, PG16, PG17, PG18 = 130022, 140019, 150014, 160010, 170006, 180001


@pytest.mark.parametrize("version", [90624, 100023, 120022, PG13, 139999])
def test_servers_before_14_are_refused(version: int) -> None:
    with pytest.raises(SourceFatal, match="needs PostgreSQL 14 or later") as raised:
        check_supported(version, "postgresql://db.example/shop")
    assert "db.example/shop" in str(raised.value)


def test_the_refusal_names_the_release_as_people_write_it() -> None:
    with pytest.raises(SourceFatal, match=r"PostgreSQL 13\.22 on"):
        check_supported(PG13, "here")
    with pytest.raises(SourceFatal, match=r"PostgreSQL 9\.6\.24 on"):
        check_supported(90624, "here")


@pytest.mark.parametrize("version", [140000, PG14, PG15, PG16, PG17, PG18, 190000])
def test_14_and_later_are_accepted(version: int) -> None:
    check_supported(version, "here")


@pytest.mark.parametrize(
    ("version", "proto"),
    [(140000, 2), (PG14, 2), (PG15, 3), (PG16, 4), (PG17, 4), (PG18, 4), (190000, 4)],
)
def test_protocol_version_by_server(version: int, proto: int) -> None:
    assert protocol_version(version) == proto
    assert stream_options(version, "p")["proto_version"] == str(proto)


def test_major() -> None:
    assert [major(v) for v in (PG14, PG15, PG18)] == [14, 15, 18]


@pytest.mark.parametrize("version", [PG14, PG15, PG16, PG17, PG18])
def test_plain_streaming_asks_for_messages_and_nothing_else(version: int) -> None:
    options = stream_options(version, "shop_pub")
    assert options == {
        "proto_version": str(protocol_version(version)),
        "publication_names": "shop_pub",
        "messages": "true",  # heartbeats, watermarks and signals are logical messages
    }


@pytest.mark.parametrize(
    ("version", "streaming"),
    [(PG14, "on"), (PG15, "on"), (PG16, "parallel"), (PG17, "parallel"), (PG18, "parallel")],
)
def test_in_progress_streaming_mode_by_server(version: int, streaming: str) -> None:
    options = stream_options(version, "p", stream_in_progress=True)
    assert options["streaming"] == streaming
    # PostgreSQL refuses parallel streaming below protocol 4.
    assert streaming == "on" or int(options["proto_version"]) >= 4


def test_two_phase_and_binary_are_never_asked_for() -> None:
    for version in (PG14, PG15, PG16, PG17, PG18):
        options = stream_options(version, "p", stream_in_progress=True)
        assert "two_phase" not in options and "binary" not in options


@pytest.mark.parametrize("version", [PG16, PG17, PG18])
def test_skip_replicated_asks_for_origin_none(version: int) -> None:
    assert stream_options(version, "p", skip_replicated=True)["origin"] == "none"
    assert "origin" not in stream_options(version, "p")


@pytest.mark.parametrize("version", [PG14, PG15])
def test_skip_replicated_before_16_is_a_start_error_naming_the_version(version: int) -> None:
    with pytest.raises(SourceFatal, match="skip_replicated needs PostgreSQL 16 or later") as got:
        stream_options(version, "p", skip_replicated=True)
    assert f"runs {version // 10000}." in str(got.value)


class _Catalog:
    """A catalog of a server the harness cannot start: only ``check_server`` is reached."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.asked: list[str] = []

    def check_server(self) -> int:
        self.asked.append("check_server")
        return self.version

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the source went on to {name} on a refused server")


def _source(**options: Any) -> PostgresSource:
    config = PostgresSourceConfig.model_validate(
        {"type": "postgres", "dsn": "postgresql://u:secret@db/shop", "tables": ["public.t"]}
        | options
    )
    context = SourceContext(
        pipeline="p", log=None, logger=structlog.get_logger(), on_bad_record="fail"
    )  # type: ignore[arg-type]
    return PostgresSource(config, context)


def test_the_source_refuses_13_before_anything_else() -> None:
    catalog = _Catalog(PG13)
    with pytest.raises(SourceFatal, match="needs PostgreSQL 14") as raised:
        _source().check_server(catalog)  # type: ignore[arg-type]
    assert catalog.asked == ["check_server"]
    assert "secret" not in str(raised.value)


def test_the_source_refuses_skip_replicated_on_15_at_start() -> None:
    catalog = _Catalog(PG15)
    with pytest.raises(SourceFatal, match="PostgreSQL 16"):
        _source(skip_replicated=True).check_server(catalog)  # type: ignore[arg-type]


def test_the_source_options_follow_its_config() -> None:
    source = _source(skip_replicated=True, stream_in_progress=True, publication="shop_pub")
    assert source.check_server(_Catalog(PG17)) == {  # type: ignore[arg-type]
        "proto_version": "4",
        "publication_names": "shop_pub",
        "messages": "true",
        "streaming": "parallel",
        "origin": "none",
    }
