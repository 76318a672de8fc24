"""A consumer group as Kafka's coordinator describes it: its state, its members and which
partitions each one owns (``cdc status``).

Only the Kafka log has this: the embedded log has no members to describe, its consumers each
read every partition (see :meth:`cdc.log.embedded.log.EmbeddedLog.consumer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdc.log.base import TopicPartition


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member of a group, as the coordinator knows it."""

    member_id: str
    client_id: str
    host: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group's state (``Stable``, ``Empty``, ``PreparingRebalance``...) and its members."""

    group: str
    state: str
    members: tuple[GroupMember, ...]

    def owners(self) -> dict[TopicPartition, str]:
        """The member id that owns each assigned partition."""
        return {tp: m.member_id for m in self.members for tp in m.partitions}


def described(found: Any) -> GroupDescription:
    """Our view of a ``confluent_kafka.admin.ConsumerGroupDescription``."""
    members = tuple(
        GroupMember(
            str(m.member_id),
            str(m.client_id),
            str(m.host).lstrip("/"),  # the broker reports the peer address as "/10.0.0.5"
            tuple(
                sorted(
                    TopicPartition(tp.topic, tp.partition) for tp in m.assignment.topic_partitions
                )
            ),
        )
        for m in found.members
    )
    return GroupDescription(
        str(found.group_id), _state_name(found.state), tuple(sorted(members, key=_order))
    )


def _order(member: GroupMember) -> tuple[tuple[TopicPartition, ...], str]:
    """Members in the order of the partitions they own: stable across runs of ``cdc status``."""
    return member.partitions, member.member_id


def _state_name(state: Any) -> str:
    """``ConsumerGroupState.STABLE`` as Kafka spells it: ``Stable``."""
    name = getattr(state, "name", str(state))
    return "".join(part.capitalize() for part in str(name).split("_"))
