"""envhub: a gym-style environment hub and agentic RL harness for multi-turn tool use.

``import envhub`` imports none of the names it exports: each one's module is imported when
the name is first used (``envhub.make``, ``from envhub import tool``), so a program that
needs one part of envhub, such as the CLI printing its ``--help``, does not pay for the
rest. ``_EXPORTS`` says where each name lives; the ``TYPE_CHECKING`` imports say the same
to type checkers and documentation tools.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from envhub import _moved

if TYPE_CHECKING:
    from envhub import rollout as rollout
    from envhub.budgets import Budgets as Budgets
    from envhub.clients.connect import connect as connect
    from envhub.clients.describe import describe_environments as describe_environments
    from envhub.clients.local import LocalEnvironment as LocalEnvironment
    from envhub.clients.local import make as make
    from envhub.clients.remote import RemoteEnvironment as RemoteEnvironment
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
    from envhub.users import LLMUser as LLMUser
    from envhub.users import UserEndpoint as UserEndpoint
    from envhub.users import UserProfile as UserProfile

_moved.install()  # old import paths (envhub.client, ...) keep working; see envhub._moved

# each exported name: the module it is imported from on first use (the module itself for a
# subpackage: ``envhub.rollout.run(env, policy, tasks="0:100")`` after a bare ``import envhub``)
_EXPORTS: dict[str, str] = {
    "Budgets": "envhub.budgets",
    "CloseResult": "envhub.types",
    "ContextLengthExceeded": "envhub.errors",
    "EnvhubError": "envhub.errors",
    "Environment": "envhub.environment",
    "EnvironmentClient": "envhub.protocol",
    "GoldCall": "envhub.task",
    "LLMUser": "envhub.users",
    "LocalEnvironment": "envhub.clients.local",
    "Observation": "envhub.types",
    "OpeningSession": "envhub.protocol",
    "RemoteEnvironment": "envhub.clients.remote",
    "Reward": "envhub.types",
    "Session": "envhub.runtime.session",
    "SessionHandle": "envhub.protocol",
    "StepResult": "envhub.types",
    "SyncSession": "envhub.runtime.sync",
    "Task": "envhub.task",
    "TaskSet": "envhub.task",
    "ToolCall": "envhub.types",
    "ToolSpec": "envhub.tools",
    "UserEndpoint": "envhub.users",
    "UserProfile": "envhub.users",
    "UserTurn": "envhub.environment",
    "connect": "envhub.clients.connect",
    "describe_environments": "envhub.clients.describe",
    "discover_environments": "envhub.registry",
    "make": "envhub.clients.local",
    "rollout": "envhub.rollout",
    "sync_session": "envhub.runtime.sync",
    "tool": "envhub.tools",
}

__all__ = [
    "Budgets",
    "CloseResult",
    "ContextLengthExceeded",
    "EnvhubError",
    "Environment",
    "EnvironmentClient",
    "GoldCall",
    "LLMUser",
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
    "UserEndpoint",
    "UserProfile",
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
    source = _EXPORTS.get(name)
    if source is None:
        raise AttributeError(f"module 'envhub' has no attribute {name!r}")
    module = import_module(source)
    value = module if source == f"envhub.{name}" else getattr(module, name)
    globals()[name] = value  # later uses are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
