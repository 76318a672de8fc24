"""Kafka's default partitioner for keyed records, so Java consumers and producers agree.

The hash is ``org.apache.kafka.common.utils.Utils.murmur2`` (MurmurHash2, 32-bit, seed
``0x9747b28c``) and the partition is ``toPositive(murmur2(key)) % partitions``, exactly as the
Java client's built-in partitioner computes it for a record with a key.
"""

from __future__ import annotations

import struct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit integer (Java's ``int``)."""
    length = len(data)
    h = _SEED ^ length
    body = length >> 2
    # Java reads the body as little-endian 4-byte words; one unpack is the fastest way in pure
    # Python (struct caches the compiled format itself, in a bounded cache).
    for word in struct.unpack_from(f"<{body}I", data):
        k = (word * _M) & _MASK
        k = ((k ^ (k >> 24)) * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        # Java's switch falls through: tail bytes are XORed in highest first, then mixed once.
        i = body << 2
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h = ((h ^ data[i]) * _M) & _MASK
    h = ((h ^ (h >> 13)) * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows)."""
    return number & 0x7FFFFFFF


def partition_for(key: bytes | None, partitions: int) -> int:
    """The partition of a record with ``key`` among ``partitions``.

    Args:
        key: the serialized record key; ``None`` (no key) always goes to partition 0, since the
            embedded log has no sticky partitioner to spread unkeyed records.
        partitions: the topic's partition count, at least 1.

    Returns:
        ``toPositive(murmur2(key)) % partitions``, like Kafka's ``DefaultPartitioner``.
    """
    if partitions == 1 or key is None:
        return 0
    return (murmur2(key) & 0x7FFFFFFF) % partitions
