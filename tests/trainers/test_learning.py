"""GRPO through envhub makes the tiny model better on held-out ``calc`` tasks, and the
shuffled-reward control does not: the check that the reward's information reaches the
update (advantage sign, loss mask on the sampled tokens, logprob alignment, no reward
leaking across a group), which the plumbing tests cannot see.

Runs ``benchmarks/learning.py`` itself (warm-up, held-out evaluation, four GRPO steps
through ``envhub.rollout.stream`` per arm) with fixed seeds, one torch thread and
``max_staleness`` 0, so the figures are a function of the code, not of timing. The tiny
model reads and writes only the demonstrations' tokens (``--compact-vocabulary``):
about two CPU-minutes, against five over SmolLM2's whole vocabulary; marked slow.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from benchmarks import learning  # noqa: E402

pytestmark = pytest.mark.slow

ARGS = [
    "--trainer", "stream", "--arms", "real,shuffled", "--seeds", "1", "--steps", "4",
    "--eval-every", "4", "--max-staleness", "0", "--eval-tasks", "16", "--compact-vocabulary",
]  # fmt: skip


@pytest.fixture
def torch_settings_restored() -> Iterator[None]:
    """The benchmark sets process-wide torch state; later tests of this worker get theirs
    back."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


@pytest.mark.usefixtures("torch_settings_restored")
def test_grpo_raises_heldout_success_and_the_shuffled_control_does_not(tmp_path: Path) -> None:
    results = learning.main([*ARGS, "--out", str(tmp_path)])

    warm = results["warmup_pass1"]
    assert 0 < warm < 1, f"the warm-up leaves nothing to learn or no signal: {warm}"
    real, shuffled = results["summary"]["stream"]["real"], results["summary"]["stream"]["shuffled"]
    assert real["before"] == shuffled["before"] == warm  # one start, one evaluation sampler
    assert real["steps"] == shuffled["steps"] == 4
    assert real["after"] > warm, f"GRPO did not raise held-out pass@1: {real}"
    assert shuffled["after"] <= warm, f"the shuffled-reward control learned: {shuffled}"
    assert (tmp_path / "learning.png").stat().st_size > 0
