"""docker-compose.yml cannot run here (no Docker engine): check its shape and that it uses the
same settings as the test fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.services.kafka import BASE_SETTINGS as KAFKA_SETTINGS
from tests.services.postgres import BASE_SETTINGS as PG_SETTINGS

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    result: dict[str, Any] = document["services"]
    return result


def healthcheck_text(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return test if isinstance(test, str) else " ".join(test)


def test_the_four_services_with_ports_and_healthchecks(services: dict[str, Any]) -> None:
    assert set(services) == {"postgres", "kafka", "redis", "mongo"}
    ports = {name: service["ports"] for name, service in services.items()}
    assert ports == {
        "postgres": ["5432:5432"],
        "kafka": ["9092:9092"],
        "redis": ["6379:6379"],
        "mongo": ["27017:27017"],
    }
    assert all("healthcheck" in service for service in services.values())


def test_postgres_15_with_logical_decoding(services: dict[str, Any]) -> None:
    postgres = services["postgres"]
    assert postgres["image"] == "postgres:15"
    command = postgres["command"]
    flags = [command[i + 1] for i, arg in enumerate(command) if arg == "-c"]
    assert "wal_level=logical" in flags
    for name in ("wal_level", "max_replication_slots", "max_wal_senders"):
        assert f"{name}={PG_SETTINGS[name]}" in flags


def test_kafka_4_in_kraft_mode_with_the_fixture_settings(services: dict[str, Any]) -> None:
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:4.")
    env = {k: str(v) for k, v in kafka["environment"].items()}
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@localhost:9093"
    assert "CONTROLLER" in env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://localhost:9092"
    assert not any("ZOOKEEPER" in name for name in env)
    # The image turns KAFKA_A_B into the server property a.b.
    properties = {
        name.removeprefix("KAFKA_").lower().replace("_", "."): value
        for name, value in env.items()
        if name.startswith("KAFKA_")
    }
    assert {k: properties.get(k) for k in KAFKA_SETTINGS} == KAFKA_SETTINGS


def test_mongo_is_a_one_member_replica_set(services: dict[str, Any]) -> None:
    mongo = services["mongo"]
    assert mongo["image"].startswith("mongo:")
    command = mongo["command"]
    assert command[command.index("--replSet") + 1] == "rs0"
    check = healthcheck_text(mongo)
    assert "rs.initiate" in check and "_id: 'rs0'" in check


def test_redis(services: dict[str, Any]) -> None:
    assert services["redis"]["image"].startswith("redis:")
    assert "ping" in healthcheck_text(services["redis"])
