"""envhub SWE environment: fix injected bugs in real Python repositories, graded by their tests."""

from envhub_swe.env import SweEnv

__all__ = ["SweEnv"]
