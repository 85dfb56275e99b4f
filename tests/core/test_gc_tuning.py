"""The collector settings of long-running commands, and that they are undone after."""

from __future__ import annotations

import gc

from envhub._util.gc_tuning import gc_tuned_for_throughput


def test_settings_apply_inside_the_block_and_are_restored() -> None:
    before = gc.get_threshold()
    with gc_tuned_for_throughput(50_000):
        assert gc.get_threshold() == (50_000, 50, 100)
        assert gc.get_freeze_count() > 0  # startup objects are out of the collector's scans
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_zero_leaves_python_alone() -> None:
    before = gc.get_threshold()
    with gc_tuned_for_throughput(0):
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
