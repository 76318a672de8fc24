"""Kafka's murmur2 partitioner, checked against the Java client's own values."""

from __future__ import annotations

import pytest

from cdc.log.partitioner import murmur2, partition_for, to_positive

# Kafka's UtilsTest.testMurmur2 (org.apache.kafka.common.utils), plus the empty input.
JAVA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (b"", 275646681),
]


@pytest.mark.parametrize(("data", "expected"), JAVA_MURMUR2)
def test_murmur2_matches_kafka_java(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_murmur2_covers_every_tail_length() -> None:
    # Lengths 2, 3, 6 and 24 in the vectors above hit tails 2, 3, 2 and 0; "abc" hits 3, and
    # this input hits tail 1, so a broken fall-through in any branch changes a result.
    assert len({murmur2(b"x" * n) for n in range(9)}) == 9


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-790332482) == 1357151166
    assert to_positive(-(2**31)) == 0  # Math.abs would overflow here; toPositive gives 0
    assert to_positive(42) == 42


@pytest.mark.parametrize(
    ("key", "partitions", "expected"),
    [
        (b"foobar", 10, 6),  # 1357151166 % 10
        (b"foobar", 50, 16),
        (b"21", 7, (-973932308 & 0x7FFFFFFF) % 7),
        (b"abc", 3, 479470107 % 3),
    ],
)
def test_partition_for_is_to_positive_modulo(key: bytes, partitions: int, expected: int) -> None:
    assert partition_for(key, partitions) == expected


def test_single_partition_and_null_key_go_to_partition_zero() -> None:
    assert partition_for(b"foobar", 1) == 0
    assert partition_for(None, 8) == 0


def test_partition_for_spreads_keys_over_all_partitions() -> None:
    keys = [b'{"id": %d}' % i for i in range(1000)]
    counts = [0] * 4
    for key in keys:
        counts[partition_for(key, 4)] += 1
    assert all(150 < count < 350 for count in counts), counts
