"""envhub: a gym-style environment hub and agentic RL harness for multi-turn tool use.

The core imported here is light (pydantic, httpx); servers, sandboxes, the gymnasium
adapter and trainer integrations load only when their attribute is first used.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from envhub import _moved
from envhub.budgets import Budgets as Budgets
from envhub.clients.connect import connect as connect
from envhub.clients.describe import describe_environments as describe_environments
from envhub.clients.local import LocalEnvironment as LocalEnvironment
from envhub.clients.local import make as make
from envhub.environment import Environment as Environment
from envhub.environment import UserTurn as UserTurn
from envhub.errors import ContextLengthExceeded as ContextLengthExceeded
from envhub.errors import EnvhubError as EnvhubError
from envhub.protocol import EnvironmentClient as EnvironmentClient
from envhub.protocol import OpeningSession as OpeningSession
from envhub.protocol import SessionHandle as SessionHandle
from envhub.registry import discover_environments as discover_environments
from envhub.runtime.session import Session as Session
from envhub.runtime.sync import SyncSession as SyncSession
from envhub.runtime.sync import sync_session as sync_session
from envhub.task import GoldCall as GoldCall
from envhub.task import Task as Task
from envhub.task import TaskSet as TaskSet
from envhub.tools import ToolSpec as ToolSpec
from envhub.tools import tool as tool
from envhub.types import CloseResult as CloseResult
from envhub.types import Observation as Observation
from envhub.types import Reward as Reward
from envhub.types import StepResult as StepResult
from envhub.types import ToolCall as ToolCall

_moved.install()  # old import paths (envhub.client, ...) keep working; see envhub._moved

_LAZY = {
    "RemoteEnvironment": "envhub.clients.remote",
}
# Subpackages reachable as attributes without importing them first:
# ``envhub.rollout.run(env, policy, tasks="0:100")`` after a bare ``import envhub``.
_LAZY_MODULES = ("rollout",)

__all__ = [
    "Budgets",
    "CloseResult",
    "ContextLengthExceeded",
    "EnvhubError",
    "Environment",
    "EnvironmentClient",
    "GoldCall",
    "LocalEnvironment",
    "Observation",
    "OpeningSession",
    "RemoteEnvironment",
    "Reward",
    "Session",
    "SessionHandle",
    "StepResult",
    "SyncSession",
    "Task",
    "TaskSet",
    "ToolCall",
    "ToolSpec",
    "UserTurn",
    "connect",
    "describe_environments",
    "discover_environments",
    "make",
    "rollout",
    "sync_session",
    "tool",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # the installed distribution's (VERSION in the checkout, the one place it is
        # written), read on first use: ``import envhub`` reads no metadata
        from importlib.metadata import version

        from envhub.registry import CORE_DISTRIBUTION

        globals()["__version__"] = found = version(CORE_DISTRIBUTION)
        return found
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    if name in _LAZY_MODULES:
        return import_module(f"envhub.{name}")
    raise AttributeError(f"module 'envhub' has no attribute {name!r}")
