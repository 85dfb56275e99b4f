"""The one exception tree of envhub.

Every failure that crosses a module boundary is one of these, so callers catch
``EnvhubError`` and servers map ``code`` to an HTTP status in one place::

    EnvhubError
    ├── RegistryError            unknown or broken environment plugin      (unknown_environment)
    ├── TaskNotFound             unknown task id                           (unknown_task)
    ├── InvalidRequest           bad options, bad arguments to an API      (invalid_request)
    ├── ToolError                a tool call failed; becomes an is_error observation
    │   ├── ToolArgumentError    malformed JSON / wrong types / unknown tool
    │   ├── ToolTimeout          the call ran past its timeout
    │   └── FileOperationError   a sandbox file operation failed in a working sandbox
    ├── SessionError             session lifecycle problems
    │   ├── SessionNotFound      unknown or reaped session id              (session_not_found)
    │   ├── SessionClosed        stepping a closed/finished session        (session_closed)
    │   ├── NotDeterministic     a fork's replay diverged from the episode (not_deterministic)
    │   └── CapacityError        too many sessions                         (capacity)
    ├── SandboxError             a sandbox cannot start or run commands    (sandbox_error)
    ├── EnvironmentFailure       reset/reward/close of an environment raised  (internal)
    │   └── UserSimulatorError   a simulated user's model failed    (user_simulator_error)
    ├── JudgeError               a reward's judge model failed or gave no verdict (judge_error)
    ├── PolicyError              the model endpoint failed
    │   ├── TransientPolicyError 429/5xx/timeouts: worth retrying
    │   └── ContextLengthExceeded the prompt no longer fits the model's context
    ├── RemoteError              an envhub server answered with an error body
    ├── ReplicaLost              a session's server replica died or became unreachable
    ├── FleetError               no fleet at that address, or no healthy replica of an env
    ├── RolloutFailed            a rollout stopped early or masked too many episodes
    ├── StreamTimeout            next_batch ran out of time                (stream_timeout)
    ├── WeightUpdateFailed       model servers did not take new weights    (weight_update_failed)
    ├── PackageIndexError        a package index is unreachable, failed or answered nonsense
    │   └── CardError            a plugin's card is missing, malformed or too new
    ├── PublishRefused           envhub publish stopped before uploading (build or check failed)
    └── Unauthorized             missing or wrong bearer token             (unauthorized)

``code`` is the machine-readable error code of the HTTP API (docs/architecture.md). A client turns
an error answer back into the class that declares its code (:func:`error_class`), so a
new subclass crosses the wire as itself, with no table to extend.
"""

from __future__ import annotations

import inspect
from collections import deque

__all__ = [
    "CapacityError",
    "CardError",
    "ContextLengthExceeded",
    "EnvhubError",
    "EnvironmentFailure",
    "FileOperationError",
    "FleetError",
    "InvalidRequest",
    "JudgeError",
    "NotDeterministic",
    "OptionsRequired",
    "PackageIndexError",
    "PolicyError",
    "PublishRefused",
    "RegistryError",
    "RemoteError",
    "ReplicaLost",
    "RolloutFailed",
    "SandboxError",
    "SessionClosed",
    "SessionError",
    "SessionNotFound",
    "StreamTimeout",
    "TaskNotFound",
    "ToolArgumentError",
    "ToolError",
    "ToolTimeout",
    "TransientPolicyError",
    "Unauthorized",
    "UserSimulatorError",
    "WeightUpdateFailed",
    "error_class",
]


class EnvhubError(Exception):
    """Root of all envhub errors; ``code`` is the HTTP API error code."""

    code: str = "internal"

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class RegistryError(EnvhubError):
    code = "unknown_environment"


class TaskNotFound(EnvhubError):
    code = "unknown_task"


class InvalidRequest(EnvhubError):
    code = "invalid_request"


class OptionsRequired(InvalidRequest):
    """The environment has no default for an option only its operator can give (the
    server to reach, the taskset to load): not a broken plugin, so ``envhub list`` shows
    what it needs instead of an error."""


class ToolError(EnvhubError):
    code = "tool_error"


class ToolArgumentError(ToolError):
    code = "invalid_tool_call"


class ToolTimeout(ToolError):
    code = "timeout"


class FileOperationError(ToolError):
    """A sandbox file operation (read, write, upload, download) ran and failed: missing
    path, permission denied, read-only file system, too large. The sandbox works; what is
    in it (the model's doing) made the operation fail, so a tool that meets it gives an
    error observation. Code that needs the file for setup or grading decides itself
    whether that is infrastructure (``SandboxError``) or the model's outcome."""

    code = "file_error"


class SessionError(EnvhubError):
    code = "session_error"


class SessionNotFound(SessionError):
    code = "session_not_found"


class SessionClosed(SessionError):
    code = "session_closed"


class NotDeterministic(SessionError):
    """A fork could not reproduce the episode: replaying its tool calls in a fresh
    instance gave other observations than the episode recorded, or the environment
    refuses to fork because it knows it cannot reproduce its state (an MCP server with
    side effects). The parent session is untouched; no child was created."""

    code = "not_deterministic"


class CapacityError(SessionError):
    code = "capacity"


class SandboxError(EnvhubError):
    code = "sandbox_error"


class JudgeError(EnvhubError):
    """A judge (:mod:`envhub.rewards.judge`) could not score an episode: its model
    endpoint failed after its retries, or none of its attempts answered a verdict in the
    judge's format. Infrastructure, never the policy's doing: the rollout masks the episode
    with ``stop_reason="judge_error"`` and does not run it again (the judge already
    retried), so a broken judge never scores an answer 0."""

    code = "judge_error"


class PolicyError(EnvhubError):
    code = "policy_error"


class TransientPolicyError(PolicyError):
    code = "policy_transient"


class ContextLengthExceeded(PolicyError):
    """The model server refused the prompt: the conversation no longer fits its context."""

    code = "context_length"


class RemoteError(EnvhubError):
    """An envhub server answered with ``{"error": {code, message}}``; ``status`` is HTTP's."""

    def __init__(self, message: str, *, code: str, status: int) -> None:
        super().__init__(message, code=code)
        self.status = status


class ReplicaLost(EnvhubError):
    """The server replica holding a session died or stopped answering (connection
    refused or dropped). Infrastructure, never the model's doing: the rollout masks the
    attempt and retries the episode on another replica
    (:class:`envhub.fleet.PooledEnvironment` raises it)."""

    code = "replica_lost"


class FleetError(EnvhubError):
    """A pool or fleet cannot serve an environment: no Ray cluster or no envhub fleet at
    the address, no replica of the environment, or none healthy within the wait."""

    code = "fleet_error"


class RolloutFailed(EnvhubError):
    """A rollout whose results cannot be trusted as a whole: its circuit breaker stopped
    it (the environment or model server looked down) or more than the allowed fraction of
    its episodes are masked. ``result`` holds what it produced (written, when it had an
    output file: ``--resume`` re-runs the masked and missing episodes)."""

    code = "rollout_failed"

    def __init__(self, message: str, *, result: object) -> None:
        super().__init__(message)
        self.result = result


class StreamTimeout(EnvhubError):
    """``RolloutStream.next_batch(timeout=)`` ran out of time before the batch was whole.
    The groups it had collected are kept and come first in the next batch."""

    code = "stream_timeout"


class Unauthorized(EnvhubError):
    code = "unauthorized"


class WeightUpdateFailed(EnvhubError):
    """``RolloutStream.update_weights`` could not pause, load or resume the inference
    servers. The stream stays usable: generation resumed on the weights the servers hold,
    and ``policy_version`` is unchanged."""

    code = "weight_update_failed"


class PackageIndexError(EnvhubError):
    """A package index (``envhub search``, ``install``, ``info --index``) could not be
    reached, answered an error status, or answered something that is not a simple API
    page; or it lacks the project or version asked for. The index is untrusted: whatever
    it sends ends here, never as a traceback."""

    code = "package_index"


class CardError(PackageIndexError):
    """A plugin distribution's card (:mod:`envhub.hub.card`) is missing (it was not
    published with ``envhub publish``), malformed, too large, or of a newer schema."""

    code = "bad_card"


class PublishRefused(EnvhubError):
    """``envhub publish`` stopped before uploading anything: the plugin did not build, its
    check failed, or the upload was refused."""

    code = "publish_refused"


class EnvironmentFailure(EnvhubError):
    """The environment's own code failed (reset, reward, close): an infra failure that
    masks the trajectory, unlike a tool exception, which the model gets to read."""

    code = "internal"


class UserSimulatorError(EnvironmentFailure):
    """The model that plays an episode's user (:class:`envhub.users.LLMUser`) failed after
    its retries, or gave no usable reply. The user is part of the environment, so the
    episode is masked like any environment failure: never scored 0 for the agent."""

    code = "user_simulator_error"


def error_class(code: str) -> type[EnvhubError] | None:
    """The class a client raises for an error answer with ``code``.

    That is the most general subclass declaring ``code`` in its own body (found breadth
    first from the root, so a subclass repeating its parent's code never shadows it; among
    unrelated classes at one depth, the first defined), skipping classes that need more
    than a message to build (:class:`RemoteError`, :class:`RolloutFailed`). Classes defined
    anywhere (a plugin's, a test's) are found once imported. ``None`` for the root's
    ``internal``, which every undeclared failure and every server crash answers (so
    :class:`EnvironmentFailure`, which repeats it, cannot claim it), and for codes no class
    declares (``not_found``, ``payload_too_large``, ``http_502``, ...): the client raises
    :class:`RemoteError` with the code for those.
    """
    if code == EnvhubError.code:
        return None
    queue = deque(EnvhubError.__subclasses__())
    seen: set[type[EnvhubError]] = set()
    while queue:
        cls = queue.popleft()
        if cls in seen:  # a class with two EnvhubError bases is met twice
            continue
        seen.add(cls)
        if cls.__dict__.get("code") == code and _built_from_message(cls):
            return cls
        queue.extend(cls.__subclasses__())
    return None


def _built_from_message(cls: type[EnvhubError]) -> bool:
    try:
        inspect.signature(cls).bind("message")
    except TypeError:
        return False
    return True
