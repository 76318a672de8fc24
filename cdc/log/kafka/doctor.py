"""``cdc doctor`` for the Kafka log: the brokers answer, and every topic of the pipeline that
exists already is compacted (the log keeps each key's latest record forever only then: a
``delete`` topic loses rows a rebuilt sink would need)."""

from __future__ import annotations

import shlex

from cdc.config.models import KafkaLogConfig
from cdc.contracts.checks import Check, failed, passed
from cdc.contracts.errors import LogError
from cdc.log.kafka.admin import KafkaAdmin


def kafka_checks(config: KafkaLogConfig, pipeline_name: str) -> list[Check]:
    """Brokers reachable within ``connect_timeout_s``; ``cleanup.policy`` of each topic of
    ``pipeline_name`` (``<pipeline>.*``). Topics not created yet are created compacted."""
    try:
        admin = KafkaAdmin(config)
    except LogError as exc:
        fix = "check log.bootstrap_servers, log.properties and that Kafka is up"
        return [failed("brokers", str(exc), fix)]
    topics = sorted(t for t in admin.partitions() if t.startswith(f"{pipeline_name}."))
    reached = passed("brokers", f"{config.bootstrap_servers} answered")
    if not topics:
        return [reached, passed("topics", "none yet: cdc run creates them compacted")]
    configs = admin.configs(topics)
    return [reached, *(_policy(config, topic, configs[topic]) for topic in topics)]


def _policy(config: KafkaLogConfig, topic: str, settings: dict[str, str]) -> Check:
    policy = settings.get("cleanup.policy", "")
    label = f"topic {topic}: cleanup.policy"
    kinds = {kind.strip() for kind in policy.split(",")}
    if kinds == {"compact"}:
        return passed(label, policy)
    command = shlex.join(
        [
            "kafka-configs.sh",
            "--bootstrap-server",
            config.bootstrap_servers,
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--add-config",
            "cleanup.policy=compact",
        ]
    )
    detail = f"{policy or 'unknown'}: records are deleted by age, so a key's latest one can go"
    return failed(label, detail, f"run: {command}")
