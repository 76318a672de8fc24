"""Continuous verification's pieces without a server: the ``verify:`` section's checks, and the
rotation over the hash ranges (:class:`cdc.runtime.verifier.Rotation`)."""

from __future__ import annotations

import pytest

from cdc.config.pipeline import parse
from cdc.contracts.errors import ConfigError
from cdc.runtime.verifier import Rotation

BASE = (
    "version: 1\nname: shop\nsource:\n  type: postgres\n  dsn: postgresql://u@h/db\n"
    "  tables: [public.t]\nsinks:\n  - {name: cache, type: redis, url: 'redis://h:6379/0'}\n"
)


def test_the_verify_section_is_optional_and_checked() -> None:
    assert parse(BASE).file.verify is None
    config = parse(BASE + "verify: {interval_s: 60, sample_keys: 5000}\n").file.verify
    assert config is not None and (config.interval_s, config.sample_keys) == (60, 5000)
    with pytest.raises(ConfigError) as caught:
        parse(BASE + "verify: {interval_s: 0, sample_keys: 0, every: 3}\n")
    where = {w for w, _ in caught.value.problems}
    assert {"verify.interval_s", "verify.sample_keys", "verify.every"} <= where


def test_a_pass_covers_every_range_then_the_depth_follows_the_largest_table() -> None:
    rotation = Rotation()
    rotation.complete = {"a", "b"}
    # 1,000 keys, 100 a sample: the next pass cuts the space in 16 ranges (100 > 1000/16).
    assert rotation.advance(1000, 100, {"a", "b"}) == {"a", "b"}
    assert (rotation.depth, rotation.index) == (4, 0)
    rotation.complete.discard("b")  # b lagged in one round: its pass is not full
    finished = [rotation.advance(1000, 100, {"a", "b"}) for _ in range(16)]
    assert finished[:-1] == [set()] * 15 and finished[-1] == {"a"}
    assert rotation.range == (4, 0) and rotation.complete == {"a", "b"}


def test_a_changed_depth_carries_the_counts_until_the_new_ranges_cover_them() -> None:
    rotation = Rotation()
    key = ("a", "public.t")
    rotation.record(key, 3)  # depth 0: one range, the whole space
    rotation.advance(400, 100, {"a"})  # the next pass: four ranges
    assert rotation.depth == 2 and rotation.mismatched == {}
    # What the finished pass found stands until the new pass has covered the space again.
    assert rotation.totals() == {key: 3}
    for index, found in enumerate([1, 0, 0]):
        rotation.record(key, found)
        assert rotation.totals() == {key: 3 + 1}, index
        rotation.advance(400, 100, {"a"})
    rotation.record(key, 0)  # the fourth range: the old one is covered, dropped
    assert rotation.totals() == {key: 1} and rotation.carried == {}


def test_a_shallower_depth_drops_each_carried_range_its_new_range_covers() -> None:
    rotation = Rotation(depth=2, index=0)
    key = ("a", "public.t")
    for found in (1, 2, 4, 8):  # a pass over four ranges
        rotation.record(key, found)
        rotation.advance(150, 100, {"a"})  # the table shrank: two ranges next
    assert rotation.depth == 1 and rotation.totals() == {key: 15}
    rotation.record(key, 0)  # the new first half covers the old ranges 0 and 1
    assert rotation.totals() == {key: 12}
    rotation.advance(150, 100, {"a"})
    rotation.record(key, 5)
    assert rotation.totals() == {key: 5} and rotation.carried == {}


def test_the_same_depth_keeps_the_counts_range_by_range() -> None:
    rotation = Rotation(depth=14)
    rotation.mismatched[("a", "public.t")] = {0: 2}
    rotation.index = (1 << 14) - 1
    rotation.advance(1_000_000, 100, {"a"})  # same depth: counts kept
    assert rotation.mismatched == {("a", "public.t"): {0: 2}} and rotation.carried == {}
