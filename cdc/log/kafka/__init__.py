"""The Kafka log: the same semantics as the embedded one, on Apache Kafka.

``log`` is the :class:`~cdc.log.base.Log` itself; ``txn`` a transaction (a transactional
producer, offsets in a compacted offsets topic), ``consumer`` a consumer group's reads,
``admin`` topics and their configs, ``common`` client settings shared by all of these, and
``images``/``image_sync`` the latest-image store the source looks TOASTed values up in.
"""

from cdc.log.kafka.log import KafkaLog

__all__ = ["KafkaLog"]
