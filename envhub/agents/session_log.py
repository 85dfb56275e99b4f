"""The session's own log of the tool calls it ran, the record an external agent's trajectory
keeps of them (:attr:`envhub.trajectory.Trajectory.session_calls`).

The rollout loop is its sessions' only client, so its trajectory's ``messages`` are the
record of what a session ran. An external agent's session is stepped over its MCP
endpoint, and the trajectory's ``messages`` are what the agent sent the model: a call
made by the agent's own code, or one that reached the session by another path, does not
show there, yet it counts towards the reward. :class:`LoggedSession` is the one handle on
the session that every path in this process goes through (the MCP endpoint and the final
answer), so its log holds every call with the session's answer, whoever sent it;
:func:`session_calls` names the model call whose reply asked for each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envhub.agents.proxy import CapturedCall
from envhub.model_text import ModelTextError, loads_json
from envhub.protocol import ClosingOnExit, SessionHandle
from envhub.trajectory import SessionCall
from envhub.types import CloseResult, Observation, SessionInfo, SessionStart, StepResult, ToolCall

__all__ = ["LoggedCall", "LoggedSession", "session_calls"]


@dataclass(frozen=True, slots=True)
class LoggedCall:
    """One call the session ran: the call, its observation, and how many model replies
    the agent had been sent when it arrived."""

    call: ToolCall
    observation: Observation
    replies_before: int


class LoggedSession(ClosingOnExit):
    """``inner`` with every step's calls logged in :attr:`calls`; ``replies_sent`` says how
    many model replies the agent has been sent so far (the capture proxy's count)."""

    def __init__(self, inner: SessionHandle, replies_sent: Callable[[], int]) -> None:
        self._inner = inner
        self._replies_sent = replies_sent
        self.calls: list[LoggedCall] = []

    @property
    def session_id(self) -> str:
        return self._inner.session_id

    @property
    def served_by(self) -> str | None:
        return self._inner.served_by

    async def reset(self) -> SessionStart:
        return await self._inner.reset()

    async def step(
        self,
        tool_calls: Sequence[ToolCall | dict[str, Any]],
        content: str | None = None,
        request_id: str | None = None,
    ) -> StepResult:
        replies_before = self._replies_sent()
        result = await self._inner.step(tool_calls, content, request_id)
        # the session accepted the calls, so each one is a valid ToolCall
        calls = [ToolCall.model_validate(call) for call in tool_calls]
        self.calls.extend(
            LoggedCall(call, observation, replies_before)
            for call, observation in zip(calls, result.observations, strict=True)
        )
        return result

    async def fork(self, n: int = 1, *, fork_id: str | None = None) -> list[LoggedSession]:
        """Children of the inner session, each logging on from a copy of this log."""
        children = []
        for inner in await self._inner.fork(n, fork_id=fork_id):
            child = LoggedSession(inner, self._replies_sent)
            child.calls = list(self.calls)
            children.append(child)
        return children

    async def close(self) -> CloseResult:
        return await self._inner.close()

    async def abort(self) -> None:
        await self._inner.abort()

    async def info(self) -> SessionInfo:
        return await self._inner.info()


def session_calls(log: Sequence[LoggedCall], replies: Sequence[CapturedCall]) -> list[SessionCall]:
    """The log as the trajectory records it. A call is attributed to the latest model reply
    the agent had when it arrived, if that reply asked for a call of that name with those
    arguments (each asked call is claimed once); otherwise to no model call."""
    unclaimed: dict[int, list[tuple[str, Any]]] = {}
    recorded = []
    for entry in log:
        turn = entry.replies_before - 1
        asked = unclaimed.setdefault(turn, _asked(replies[turn])) if turn >= 0 else []
        made = (entry.call.name, _parsed(entry.call.arguments))
        attributed = made in asked
        if attributed:
            asked.remove(made)
        recorded.append(
            SessionCall(
                name=entry.call.name,
                arguments=entry.call.arguments,
                content=entry.observation.content,
                is_error=entry.observation.is_error,
                turn=turn if attributed else None,
            )
        )
    return recorded


def _asked(reply: CapturedCall) -> list[tuple[str, Any]]:
    return [(call.name, _parsed(call.arguments)) for call in reply.completion.tool_calls]


def _parsed(arguments: str | dict[str, Any]) -> Any:
    """Arguments as a value to compare: the model's JSON string parsed where it parses
    (an agent sends the parsed arguments over MCP), else the text itself."""
    if isinstance(arguments, dict):
        return arguments
    try:
        return loads_json(arguments)
    except ModelTextError:  # not JSON, nested past the parser's limit, a huge integer
        return arguments


if TYPE_CHECKING:  # the protocol, checked statically against this implementation
    _session: type[SessionHandle] = LoggedSession
