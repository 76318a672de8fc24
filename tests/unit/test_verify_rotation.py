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


def test_a_changed_depth_forgets_the_counts_of_the_other_ranges() -> None:
    rotation = Rotation()
    rotation.mismatched[("a", "public.t")] = {0: 3}
    rotation.advance(1_000_000, 100, {"a"})
    assert rotation.depth == 14 and rotation.mismatched == {}
    rotation.mismatched[("a", "public.t")] = {0: 2}
    rotation.index = (1 << 14) - 1
    rotation.advance(1_000_000, 100, {"a"})  # same depth: counts kept
    assert rotation.mismatched == {("a", "public.t"): {0: 2}}
