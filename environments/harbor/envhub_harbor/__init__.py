"""envhub environment over Harbor and Terminal-Bench task directories (docs/bridges/harbor.md)."""

from envhub_harbor.env import HarborEnv, VerifierError
from envhub_harbor.images import TaskBuildError

__all__ = ["HarborEnv", "TaskBuildError", "VerifierError"]
