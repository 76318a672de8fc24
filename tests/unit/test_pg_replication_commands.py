"""The replication commands each server version takes (no server needed)."""

from __future__ import annotations

import pytest

from cdc.contracts.errors import SourceFatal
from connectors.postgres.replication.connection import create_slot_command
from connectors.postgres.replication.standby import ServerFacts


@pytest.mark.parametrize(
    ("action", "legacy"),
    [("export", "EXPORT_SNAPSHOT"), ("use", "USE_SNAPSHOT"), ("nothing", "NOEXPORT_SNAPSHOT")],
)
def test_postgres_14_gets_the_keyword_form(action: str, legacy: str) -> None:
    # PostgreSQL 14 rejects the parenthesised options with a syntax error.
    command = create_slot_command("shop_slot", action, 140019)  # type: ignore[arg-type]
    assert command == f'CREATE_REPLICATION_SLOT "shop_slot" LOGICAL pgoutput {legacy}'.encode()


@pytest.mark.parametrize("version", [150000, 160010, 170006, 180006])
@pytest.mark.parametrize("action", ["export", "use", "nothing"])
def test_postgres_15_and_later_get_the_parenthesised_form(action: str, version: int) -> None:
    command = create_slot_command("shop_slot", action, version)  # type: ignore[arg-type]
    expected = f"CREATE_REPLICATION_SLOT \"shop_slot\" LOGICAL pgoutput (SNAPSHOT '{action}')"
    assert command == expected.encode()


def test_the_slot_name_is_quoted() -> None:
    assert create_slot_command('a"b', "nothing", 140000).startswith(
        b'CREATE_REPLICATION_SLOT "a""b"'
    )


@pytest.mark.parametrize("version", [170006, 180006])
def test_a_failover_slot_from_postgres_17(version: int) -> None:
    command = create_slot_command("shop_slot", "export", version, failover=True)
    expected = (
        "CREATE_REPLICATION_SLOT \"shop_slot\" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)"
    )
    assert command == expected.encode()


@pytest.mark.parametrize("version", [140019, 150004, 160010])
def test_a_failover_slot_before_17_is_an_error_naming_the_versions(version: int) -> None:
    major = version // 10000
    with pytest.raises(SourceFatal, match=f"needs PostgreSQL 17 or later.*PostgreSQL {major}"):
        create_slot_command("shop_slot", "nothing", version, failover=True)


def test_server_facts_read_as_text() -> None:
    facts = ServerFacts.from_row(("true", "160010", "on", "phys"))
    assert facts == ServerFacts(True, 160010, True, "phys")
    assert not ServerFacts.from_row(("false", "170006", "off", "")).in_recovery
