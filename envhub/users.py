"""Simulated users: a second model inside the environment plays the person the agent
talks to.

An environment whose episodes are conversations (customer support, tutoring) answers
each final message of the agent from :meth:`Environment.next_user_turn` with the user's
next message, written by an :class:`LLMUser`. The user knows who it is and what it wants
(:class:`UserProfile`: a persona, a goal, an optional first message) and holds hidden
facts (:class:`HiddenFact`), things only the user knows and tells only when asked; the
agent learns them from the user's replies and from nowhere else (they live in the
task's ``metadata``, which a remote client never receives). The user ends the conversation by
writing :data:`DONE_MARKER`, or runs out of its turn budget (``UserProfile.max_turns``).

Which model plays the user is the operator's choice, never a client's: a
:class:`UserEndpoint` (``kind`` names an ``envhub.user_models`` entry point) opened with
:func:`open_user_model`. envhub registers ``scripted`` (:class:`ScriptedUserModel`,
deterministic, for tests and reproducible evaluation) and ``openai`` (any
OpenAI-compatible server, through the policy layer's client with its retries and
balancing: :mod:`envhub.policies.user_model`). This module is the contract, below the
policy layer: an environment that imports it imports no model client.

A user model that fails after its retries, or replies with nothing twice in a row, raises
:class:`~envhub.errors.UserSimulatorError`: an infrastructure failure that masks the
episode (``stop_reason="env_error"``, ``error.kind="user_simulator_error"``), never a
reward of 0.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envhub.errors import EnvhubError, InvalidRequest, UserSimulatorError
from envhub.registry import PluginKind, load_plugin, plugin_names
from envhub.task import Task
from envhub.types import Message

__all__ = [
    "DONE_MARKER",
    "USER_MODELS",
    "USER_PROMPT",
    "HiddenFact",
    "LLMUser",
    "ScriptedUserModel",
    "UserEndpoint",
    "UserModel",
    "UserModelFactory",
    "UserProfile",
    "UserRequest",
    "open_user_model",
    "user_model_names",
]

DONE_MARKER = "###DONE###"
"""What the user writes, anywhere in its reply, to end the conversation."""

USER_PROMPT = """\
You are role-playing a person who talks with an assistant. Stay in character: you are \
the person, never the assistant.

Who you are: {persona}
What you want: {goal}

What only you know (tell each thing only when the assistant asks about it; never \
invent other wishes):
{hidden}

Write only your next message to the assistant, in one or two short sentences. When the \
assistant has done what you wanted, or clearly cannot, reply with exactly {marker}"""
"""The user model's system prompt (``str.format`` fields: persona, goal, hidden, marker)."""

_OPENING_CUE = "(The conversation starts. Write your first message to the assistant.)"
_MAX_MESSAGE_CHARS = 4000  # the agent's text the user model reads, and the user's it keeps


class HiddenFact(BaseModel):
    """One thing only the user knows. ``keywords`` are the words of a question about it
    (the scripted user's cue; default: the topic itself)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str = Field(min_length=1, max_length=64)
    fact: str = Field(min_length=1, max_length=1000)
    keywords: tuple[str, ...] = ()

    def cues(self) -> tuple[str, ...]:
        return self.keywords or (self.topic,)


class UserProfile(BaseModel):
    """Who the simulated user is: a persona, a goal (an infinitive phrase, "to buy a
    hoodie": the prompt says "What you want: ..." and the scripted user "I would like
    ..."), the first message (``None``: the model writes it), the hidden facts, and
    ``max_turns``, the replies it gives after the first message before it stops
    answering. A task carries it in
    ``metadata["user"]`` (:meth:`of_task`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    persona: str = Field(min_length=1, max_length=2000)
    goal: str = Field(min_length=1, max_length=2000)
    opening: str | None = Field(None, max_length=2000)
    hidden: tuple[HiddenFact, ...] = ()
    max_turns: int = Field(8, ge=1, le=100)

    @classmethod
    def of_task(cls, task: Task) -> UserProfile:
        """The profile in ``task.metadata["user"]``; :class:`InvalidRequest` when it is
        missing or malformed (a broken task set, caught by the plugin's own tests)."""
        raw = task.metadata.get("user")
        if raw is None:
            raise InvalidRequest(f"task {task.id!r} has no metadata['user'] profile")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise InvalidRequest(f"task {task.id!r}: bad user profile: {_one_line(exc)}") from None


@dataclass(frozen=True, slots=True)
class UserRequest:
    """One call of the user model: ``messages`` from the user's side (the system prompt,
    then the user's own messages as ``assistant`` and the agent's as ``user``), the
    ``profile`` (a scripted model reads it instead of the prompt), and ``turn``, the
    user's messages so far."""

    messages: list[Message]
    profile: UserProfile
    turn: int
    task_id: str = ""


@runtime_checkable
class UserModel(Protocol):
    """Writes the user's next message. ``model`` is recorded in the reward's info. Raise
    any exception for a failure (the :class:`LLMUser` turns it into a
    :class:`~envhub.errors.UserSimulatorError`)."""

    model: str

    async def reply(self, request: UserRequest) -> str: ...

    async def aclose(self) -> None: ...


class UserEndpoint(BaseModel):
    """Which model plays the user: operator-side configuration (an environment option
    that is never among its ``client_options``). ``kind`` is an ``envhub.user_models``
    entry point (``scripted``, ``openai``) or ``module:Name``; the others are the
    endpoint's: the model name and base URLs, the name of the environment variable that
    holds its API key (never the key itself: options are logged and listed), sampling,
    and the retries of one request on transient errors (429, 5xx, timeouts)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = "scripted"
    model: str | None = None
    base_urls: tuple[str, ...] = ()
    api_key_env: str | None = None
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(200, ge=1, le=8192)
    max_attempts: int = Field(3, ge=1, le=20)
    request_timeout_s: float = Field(60.0, gt=0.0, le=3600.0)

    def opener(self) -> Callable[[], UserModel]:
        """A function that opens this endpoint's model (each call a new one, the caller's
        to close). The kind's factory is looked up now, so an environment that takes the
        endpoint as an option refuses an unknown kind when it is built, before any
        episode: :class:`InvalidRequest` naming the installed kinds."""
        factory = load_plugin(USER_MODELS, self.kind)
        if self.kind != "scripted" and not self.model:
            raise InvalidRequest(f"the {self.kind!r} user endpoint needs a model name")

        def open_model() -> UserModel:
            model = factory(self)
            if not isinstance(model, UserModel):
                raise InvalidRequest(f"user model {self.kind!r} built {model!r}, not a UserModel")
            return model

        return open_model

    @classmethod
    def parse(cls, value: UserEndpoint | Mapping[str, Any] | str) -> UserEndpoint:
        """An endpoint from an option's value: an endpoint, a mapping, a JSON object
        (``--env-arg 'user={"kind": "openai", ...}'``) or a bare kind (``scripted``).
        :class:`InvalidRequest` names what is wrong."""
        if isinstance(value, UserEndpoint):
            return value
        try:
            if isinstance(value, str):
                text = value.strip()
                value = json.loads(text) if text.startswith("{") else {"kind": text}
            return cls.model_validate(value)
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"bad user endpoint: not a JSON object: {exc}") from None
        except ValidationError as exc:
            raise InvalidRequest(f"bad user endpoint: {_one_line(exc)}") from None


UserModelFactory = Callable[[UserEndpoint], UserModel]

USER_MODELS: PluginKind[UserModelFactory] = PluginKind("envhub.user_models", "user model")
"""The ``envhub.user_models`` entry-point group: a factory ``(UserEndpoint) -> UserModel``
by ``UserEndpoint.kind``."""


def user_model_names() -> list[str]:
    """The installed user models' kinds, from metadata only."""
    return plugin_names(USER_MODELS)


def open_user_model(endpoint: UserEndpoint) -> UserModel:
    """The user model ``endpoint`` names, built by its factory; the caller closes it."""
    return endpoint.opener()()


class LLMUser:
    """The user of one episode: keeps its side of the conversation and asks ``model`` for
    each message. ``owns_model``: :meth:`aclose` closes the model too (one opened for
    this episode; a model shared by episodes is closed by whoever opened it).

    :meth:`opening` gives the first message, :meth:`reply` each later one, or ``None``
    once the user is done (``stop_reason`` says why: ``"user_done"``, it wrote
    :data:`DONE_MARKER`; ``"user_turn_budget"``, it had replied ``max_turns`` times).
    The agent's messages reach the model as the user's interlocutor's words and nothing
    else; whatever they say, they change only what the user writes next.
    """

    def __init__(
        self,
        profile: UserProfile,
        model: UserModel,
        *,
        task_id: str = "",
        prompt: str = USER_PROMPT,
        owns_model: bool = False,
    ) -> None:
        self.profile = profile
        self.model = model
        self.task_id = task_id
        self.system_prompt = prompt.format(
            persona=profile.persona,
            goal=profile.goal,
            hidden="\n".join(f"- {f.topic}: {f.fact}" for f in profile.hidden) or "- nothing",
            marker=DONE_MARKER,
        )
        self.owns_model = owns_model
        self.history: list[Message] = []
        self.turns = 0
        self.stop_reason: str | None = None
        self.calls: list[dict[str, Any]] = []

    async def opening(self) -> str:
        """The user's first message: the profile's, else the model's."""
        text = self.profile.opening or await self._ask(
            [*self._messages(), {"role": "user", "content": _OPENING_CUE}]
        )
        self.history.append({"role": "assistant", "content": text})
        return text

    async def reply(self, agent_message: str) -> str | None:
        """The user's answer to the agent's ``agent_message``, or ``None`` when the user
        is done (:attr:`stop_reason`)."""
        if self.stop_reason is not None:
            return None
        if self.turns >= self.profile.max_turns:
            self.stop_reason = "user_turn_budget"
            return None
        said = agent_message.strip()[:_MAX_MESSAGE_CHARS] or "(the assistant said nothing)"
        self.history.append({"role": "user", "content": said})
        text = await self._ask(self._messages())
        self.turns += 1
        if DONE_MARKER in text:
            self.stop_reason = "user_done"
            return None
        self.history.append({"role": "assistant", "content": text})
        return text

    def _messages(self) -> list[Message]:
        return [{"role": "system", "content": self.system_prompt}, *self.history]

    async def _ask(self, messages: list[Message]) -> str:
        """The model's reply, stripped; an empty one is asked again once. Any failure is
        a :class:`UserSimulatorError`."""
        for _ in range(2):
            request = UserRequest(messages, self.profile, len(self.calls), self.task_id)
            started = time.perf_counter()
            try:
                raw = await self.model.reply(request)
            except Exception as exc:
                detail = exc.message if isinstance(exc, EnvhubError) else str(exc)
                raise UserSimulatorError(
                    f"the user model {self.model.model!r} failed: {type(exc).__name__}: {detail}"
                ) from exc
            text = _clean(raw)
            self.calls.append({"latency_s": round(time.perf_counter() - started, 4),
                               "output": text})  # fmt: skip
            if text:
                return text
        raise UserSimulatorError(f"the user model {self.model.model!r} replied with nothing twice")

    def info(self) -> dict[str, Any]:
        """What a reward's ``info`` records about the user, under ``"user"``: its model,
        replies, why it stopped, and each model call's latency and output (``envhub
        view`` shows them beside the judges' calls)."""
        return {"user": {"model": self.model.model, "turns": self.turns,
                         "stop": self.stop_reason, "calls": self.calls}}  # fmt: skip

    def state(self) -> dict[str, Any]:
        """The conversation as plain data, for an environment's snapshot."""
        return {
            "history": [dict(m) for m in self.history],
            "turns": self.turns,
            "stop_reason": self.stop_reason,
            "calls": [dict(c) for c in self.calls],
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take up the conversation :meth:`state` returned (copied)."""
        self.history = [dict(m) for m in state["history"]]
        self.turns = int(state["turns"])
        self.stop_reason = state["stop_reason"]
        self.calls = [dict(c) for c in state["calls"]]

    async def aclose(self) -> None:
        if self.owns_model:
            await self.model.aclose()


def _one_line(exc: ValidationError) -> str:
    """Pydantic's errors as one line (a CLI error is one line): ``where: what; ...``."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())


def _clean(text: object) -> str:
    """The reply as the user's message: text only, stripped, within the length bound."""
    return text.strip()[:_MAX_MESSAGE_CHARS] if isinstance(text, str) else ""


_WORD = re.compile(r"[a-z0-9$]+")


class ScriptedUserModel:
    """A deterministic user that needs no server: it reads the profile, not the prompt.

    First message: "Hi. I would like" and the profile's goal. Then, to each agent
    message, the hidden facts whose cue words (:meth:`HiddenFact.cues`) the message
    contains and that it has not told yet; once every fact is told and the agent asks
    nothing new, :data:`DONE_MARKER`; otherwise a nudge. Stateless (what it told is read
    from the conversation), so one instance serves every episode.
    """

    model = "scripted-user"
    nudge = "Could you ask me what you need to know?"

    @classmethod
    def from_endpoint(cls, endpoint: UserEndpoint) -> ScriptedUserModel:
        """The ``scripted`` factory (``envhub.user_models`` entry point): no options."""
        return cls()

    async def reply(self, request: UserRequest) -> str:
        said = [m for m in request.messages if m.get("role") != "system"]
        if not said or said[-1].get("role") != "user" or said[-1]["content"] == _OPENING_CUE:
            return f"Hi. I would like {request.profile.goal}."
        told = " ".join(str(m.get("content", "")) for m in said if m.get("role") == "assistant")
        words = " ".join(_WORD.findall(str(said[-1].get("content", "")).lower()))
        untold = [f for f in request.profile.hidden if f.fact not in told]
        asked = [f for f in untold if any(_mentions(words, cue) for cue in f.cues())]
        if asked:
            return " ".join(f.fact for f in asked)
        return DONE_MARKER if not untold else self.nudge

    async def aclose(self) -> None:
        """Holds no resources."""


def _mentions(words: str, cue: str) -> bool:
    """Whether the normalised text ``words`` contains ``cue`` as whole words."""
    phrase = " ".join(_WORD.findall(cue.lower()))
    return bool(phrase) and f" {phrase} " in f" {words} "
