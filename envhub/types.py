"""Wire types of the function-call API, shared by local sessions, the server and clients.

These pydantic models are the single definition of what crosses a session boundary:
the in-process session returns them, the server serialises them, and the remote client
parses them back, so the three transports cannot drift apart.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from envhub.budgets import Budgets
from envhub.model_text import bounded_arguments

__all__ = [
    "ENV_STOP_PREFIX",
    "FORK_ID_PATTERN",
    "MAX_FORK",
    "MAX_REQUEST_ID",
    "SESSION_ID_PATTERN",
    "CloseResult",
    "CreateSession",
    "EnvironmentInfo",
    "EpisodeMetrics",
    "ForkRequest",
    "ForkResult",
    "Health",
    "Message",
    "Observation",
    "Reward",
    "SessionInfo",
    "SessionStart",
    "StepRequest",
    "StepResult",
    "StopReason",
    "TaskPage",
    "ToolCall",
    "chat_message",
    "env_stop_reason",
]

Message = dict[str, Any]
"""An OpenAI chat message (``role``, ``content``, optional ``tool_calls``/``tool_call_id``)."""

ENV_STOP_PREFIX = "env:"
"""Stop reasons an environment chose (:meth:`Environment.end_episode`) start with this, so
they can never be mistaken for, or pass as, one of envhub's own reasons."""

_ENV_REASON = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

StopReason = (
    Literal[
        # a session ends an episode with one of these (StepResult, CloseResult, SessionInfo)
        "terminal_tool",  # a terminal tool (e.g. submit/answer) was called
        "final_answer",  # an assistant message without tool calls
        "max_turns",  # the session's budget, or the rollout's own turn cap
        "timeout",  # the per-episode wall clock ran out
        "closed",  # closed by the client before the episode ended
        # a rollout records these in a trajectory for an episode the session did not end
        "context_length",  # the conversation outgrew the model's context: scored as it is
        "model_error",  # the model endpoint failed: masked
        "env_error",  # the environment, its sandbox or the transport failed: masked
        "judge_error",  # the reward's judge model failed or gave no verdict: masked
    ]
    # the environment ended the episode from its own state: "env:goal_reached"
    | Annotated[str, StringConstraints(pattern=rf"^{ENV_STOP_PREFIX}{_ENV_REASON.pattern}$")]
)
"""Why an episode ended: one vocabulary for session results and trajectories."""


def env_stop_reason(reason: str) -> str:
    """``"goal_reached"`` -> ``"env:goal_reached"``; a reason is a short label (letters,
    digits, ``_.-``, at most 64 characters) so it counts cleanly in rollout summaries."""
    if not isinstance(reason, str) or not _ENV_REASON.fullmatch(reason):
        raise ValueError(
            f"an environment's stop reason must be 1-64 letters, digits, '_', '.' or '-' "
            f"starting with a letter or digit, got {reason!r}"
        )
    return ENV_STOP_PREFIX + reason


class ToolCall(BaseModel):
    """One tool call of an assistant message.

    Accepts the flat form ``{id, name, arguments}`` of the envhub API and OpenAI's nested
    ``{id, type: "function", function: {name, arguments}}``. ``arguments`` stays the raw
    JSON string the model produced (a dict is accepted and kept as is, unless it is nested
    too deeply for JSON encoders: then it is cut one level past the session's limit,
    :func:`envhub.model_text.bounded_arguments`), so that malformed JSON reaches the
    session and becomes an error observation instead of a 422.
    """

    model_config = ConfigDict(extra="ignore")

    id: str = ""
    name: str
    arguments: str | dict[str, Any] = "{}"

    @field_validator("arguments")
    @classmethod
    def _encodable_arguments(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        return value if isinstance(value, str) else bounded_arguments(value)

    @model_validator(mode="before")
    @classmethod
    def _flatten_openai_form(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("function"), dict):
            fn = data["function"]
            return {
                "id": data.get("id", ""),
                "name": fn.get("name"),
                "arguments": fn.get("arguments", "{}"),
            }
        return data

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chat form, as it appears in an assistant message's ``tool_calls``."""
        import json

        arguments = (
            self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)
        )
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }


class Observation(BaseModel):
    """The result of one tool call: becomes a ``tool`` message for the model."""

    tool_call_id: str
    name: str = ""
    content: str
    is_error: bool = False
    truncated: bool = Field(
        False, description="the session cut the output to its budget (a marker says where)"
    )

    def to_message(self) -> Message:
        """The ``tool`` message as a trajectory records it: with ``is_error`` and
        ``truncated``, so a reader need not guess them from the text (a tool may print
        anything). A chat API takes it through :func:`chat_message`."""
        return {"role": "tool", "tool_call_id": self.tool_call_id, "content": self.content,
                "is_error": self.is_error, "truncated": self.truncated}  # fmt: skip


_RECORD_ONLY_KEYS = frozenset({"is_error", "truncated"})


def chat_message(message: Message) -> Message:
    """``message`` as a chat API takes it: without the keys only envhub's records carry
    (:meth:`Observation.to_message`), which OpenAI refuses ("Additional properties are not
    allowed"). Every policy that sends messages to a model sends them through this."""
    if _RECORD_ONLY_KEYS.isdisjoint(message):
        return message
    return {key: value for key, value in message.items() if key not in _RECORD_ONLY_KEYS}


class Reward(BaseModel):
    """A scalar reward with its named components and free-form details."""

    value: float
    components: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)


class EpisodeMetrics(BaseModel):
    """Counters every session keeps, whatever the environment."""

    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    truncated_outputs: int = 0
    env_s: float = 0.0

    def count_error(self, kind: str) -> None:
        self.tool_errors += 1
        self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1


class SessionStart(BaseModel):
    """What creating a session returns: the first messages and the tools."""

    session_id: str
    task_id: str
    messages: list[Message]
    tools: list[dict[str, Any]]


class StepResult(BaseModel):
    """One assistant turn's outcome: an observation per tool call, and, when the
    environment answered a final answer with a user turn
    (:meth:`~envhub.Environment.next_user_turn`), the next user messages (after the
    observations in the conversation) and the full new tool list if it changed.

    Two rewards, never mixed: ``turn_reward`` is what the environment gave this turn
    (:meth:`~envhub.Environment.turn_reward`; ``None``: it gives none), on any step;
    ``reward`` is the episode's final reward (:meth:`~envhub.Environment.reward`), set
    only on the step that ended the episode. ``turn_reward`` is a finite number: a
    reply carrying NaN or infinity there fails validation on every transport."""

    observations: list[Observation]
    reward: float | None = None
    turn_reward: float | None = Field(
        None, allow_inf_nan=False,
        description="the environment's reward for this turn (Environment.turn_reward); "
        "None: the environment gives no per-turn reward",
    )
    done: bool = False
    stop_reason: StopReason | None = None
    info: dict[str, Any] = Field(default_factory=dict)
    user_messages: list[Message] = Field(
        default_factory=list, description="the next user turn's messages; the episode goes on"
    )
    tools: list[dict[str, Any]] | None = Field(
        None, description="the tool schemas in force from now on, when they changed this step"
    )


class CloseResult(BaseModel):
    reward: float
    components: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)
    metrics: EpisodeMetrics
    stop_reason: StopReason | None = None


class SessionInfo(BaseModel):
    """A session's state summary (``GET /v1/sessions/{id}``)."""

    session_id: str
    env: str
    task_id: str
    done: bool
    closed: bool
    stop_reason: StopReason | None = None
    metrics: EpisodeMetrics
    age_s: float
    idle_s: float


SESSION_ID_PATTERN = r"^[A-Za-z0-9._~-]{1,128}$"
"""Client-chosen session ids appear in URL paths, so they are limited to unreserved characters."""


class EnvironmentInfo(BaseModel):
    """One environment: what a client needs before opening sessions on it.

    A server describes what it hosts with it (``GET /v1/environments``), and
    :func:`envhub.describe_environments` describes every installed plugin with it, where a
    plugin that fails to import or build still gets a row: ``error`` says why, and the
    fields only a built environment knows (tools, tasks, splits, options) are empty.

    ``distribution``, ``distribution_version`` and ``task_set_hash`` are the run's pins
    (:class:`envhub.trajectory.EnvRef`): a server answers with those of the plugin
    installed on it and of the task set it serves, so a remote rollout records what
    produced its episodes, not what the client has installed.
    """

    name: str
    version: str
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="OpenAI function-tool JSON schemas"
    )
    tasks: int = Field(0, description="task count over all splits")
    splits: list[str] = Field(default_factory=list)
    options: dict[str, Any] = Field(
        default_factory=dict, description="options it is built with (a server's: the operator's)"
    )
    client_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="options a client may set in POST /v1/sessions: name -> JSON schema with "
        "the type and bounds; any other option is refused",
    )
    budgets: Budgets = Field(default_factory=Budgets)
    distribution: str | None = Field(
        None, description="the installed distribution that registers the environment "
        "(envhub-rl-calc); None: a module:Class outside any plugin's entry points"
    )
    distribution_version: str | None = Field(
        None, description="that distribution's version, as pip reports it: what "
        "`envhub rollout NAME==VERSION` pins"
    )
    task_set_hash: str | None = Field(
        None, description="sha256 of the task set with these options "
        "(envhub.TaskSet.content_hash); None: the tasks are not loaded yet (a listing)"
    )
    error: str | None = Field(
        None, description="why the environment could not be loaded; never set by a server"
    )
    needs_options: str | None = Field(
        None, description="the options the operator must give before it builds, which have "
        "no default (an OpenEnv server, a verifiers taskset); set instead of error; never by "
        "a server"
    )

    @property
    def tool_names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.tools]


class TaskPage(BaseModel):
    env: str
    split: str | None
    offset: int
    limit: int
    total: int = Field(description="task count of the split, for paging")
    task_ids: list[str]


class Health(BaseModel):
    """``GET /health``: liveness plus load. Every prober (a client, a pool, the fleet)
    parses it, so one definition says what a server reports; a pool in front of several
    servers weighs replicas by ``sessions / max_sessions``, counting every client's
    sessions."""

    status: str = "ok"
    version: str
    sessions: int = 0
    max_sessions: int = 0


class CreateSession(BaseModel):
    """``POST /v1/sessions``; with ``session_id`` set, repeating the call is safe."""

    model_config = ConfigDict(extra="forbid")

    env: str
    task_id: str | None = None
    seed: int | None = None
    options: dict[str, Any] | None = Field(
        None,
        description="client-settable options of the environment (its client_options), "
        "validated, then merged over the hosted ones",
    )
    session_id: str | None = Field(None, pattern=SESSION_ID_PATTERN)


MAX_REQUEST_ID = 128
"""The longest step ``request_id`` (each session keeps a few as replay keys)."""


class StepRequest(BaseModel):
    """One assistant turn: its tool calls (flat or OpenAI form) and optional text."""

    model_config = ConfigDict(extra="forbid")

    tool_calls: list[ToolCall] = Field(default_factory=list)
    content: str | None = None
    request_id: str | None = Field(
        None,
        max_length=MAX_REQUEST_ID,
        description="repeat it to get the stored reply instead of a rerun",
    )


MAX_FORK = 64
"""The most children one fork may ask for (each is a session counted against capacity)."""

FORK_ID_PATTERN = r"^[A-Za-z0-9._~-]{1,120}$"
"""A client-chosen fork id: the children's session ids are ``{fork_id}-{i}``, so it is a
session id with room for the suffix."""


class ForkRequest(BaseModel):
    """``POST /v1/sessions/{id}/fork``: ``n`` children of the session as it stands; with
    ``fork_id`` set, repeating the call returns the same children instead of new ones."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(1, ge=1, le=MAX_FORK, description="how many children")
    fork_id: str | None = Field(
        None, pattern=FORK_ID_PATTERN,
        description="client-chosen idempotency id; the children are {fork_id}-0 ... -{n-1}",
    )


class ForkResult(BaseModel):
    """The children of a fork, each a session of its own (step, close, fork it)."""

    session_ids: list[str]
