"""The log on Apache Kafka: the embedded log's semantics with a transactional producer, compacted
topics, and consumer groups that spread a sink's partitions over its workers.

``log`` is the :class:`~cdc.log.base.Log` itself; ``txn`` a transaction (a transactional
producer, offsets in a compacted offsets topic), ``consumer`` a consumer group's reads and
``commits`` its asynchronous commits, ``partition_reader`` reads without a group, ``messages``
a consumed message as a stored record, ``admin`` topics and their configs, ``groups`` a group
as the coordinator describes it, ``common`` client settings and error translation,
``brokerless`` a client left without any broker, ``images``/``image_sync``/``projection`` the
latest-image store the source looks TOASTed values up in, and ``doctor`` the log's preflight.
"""

from cdc.log.kafka.log import KafkaLog

__all__ = ["KafkaLog"]
