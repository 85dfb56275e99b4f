"""envhub-rl-verifiers: verifiers (v1) tasksets run under envhub.

``VerifiersEnv`` (the ``verifiers`` environment) loads a taskset with verifiers' own
loader in verifiers' own venv and maps its tasks, toolsets and rewards to envhub's.
"""

from envhub_verifiers.env import VerifiersEnv as VerifiersEnv
from envhub_verifiers.worker import WorkerError as WorkerError
from envhub_verifiers.worker import default_python as default_python

__all__ = ["VerifiersEnv", "WorkerError", "default_python"]
