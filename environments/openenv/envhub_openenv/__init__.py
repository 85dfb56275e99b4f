"""envhub-rl-openenv: any OpenEnv environment as an envhub environment.

``OpenEnvEnv`` (the ``openenv`` environment) reaches an OpenEnv server (a URL, a command
or a container image) over OpenEnv's WebSocket session protocol (:mod:`.protocol`).
"""

from envhub_openenv.env import OpenEnvEnv as OpenEnvEnv
from envhub_openenv.protocol import OpenEnvSession as OpenEnvSession
from envhub_openenv.protocol import StepRefused as StepRefused

__all__ = ["OpenEnvEnv", "OpenEnvSession", "StepRefused"]
