"""One episode driven by an external agent framework, recorded as a normal trajectory.

:class:`AgentLoop` is the rollout's :class:`~envhub.rollout.episode.TurnLoop` for an
external agent: per attempt the runner opens the session (as always), the loop exposes it
over MCP (:func:`envhub.mcp.door.serve_session_mcp`), starts a :class:`CaptureProxy` in
front of the policy's endpoints and lets the :class:`AgentRunner` run; then the runner
closes (scores) the session. Retries, masking, timings and the trajectory's shared fields
are the runner's own, so ``--resume``, the circuit breaker and the summary work
unchanged. ``envhub.rollout.run(env, policy, turn_loop=AgentLoop(agent))`` runs a rollout
with it; :class:`AgentEpisodeRunner` is an episode runner with it.

The MCP endpoint answers only requests that carry the episode's bearer token
(``AgentEpisode.mcp_token``, made per episode and given to the agent alone): any local
process can find the port, and none but the agent may play the episode.

What the trajectory holds:

- ``messages``: the chat of the agent's last model call, as the agent sent it, plus that
  call's reply (the agent's final answer); ``tools``: the tools it sent with it.
- ``session_calls``: every tool call the session ran, from the session's own log
  (:mod:`envhub.agents.session_log`), each with the model call whose reply asked for it
  (``None``: none did); a call the agent's messages do not show is on record here.
- ``turns``: one per model call through the proxy, in order, with the server's token ids
  and logprobs; ``message_index`` is where the call's reply sits in a history the agent
  only appends to (each call's request length), ``prefix_ok`` as in the rollout loop.
- ``reward``: the session's. An agent that stops with a final answer (a last reply
  without tool calls) while the session is still open has it stepped into the session,
  so environments that score final answers see it; one stopped by the run's
  ``max_turns`` records ``stop_reason="max_turns"``. User turns
  (:meth:`envhub.Environment.next_user_turn`) reach the agent only after a terminal tool,
  in that tool's MCP result (:mod:`envhub.mcp.door`); one that answers the agent's final
  answer is not delivered (its run has ended) and the session closes with
  ``stop_reason="closed"``.

Masking: a model-server failure behind the proxy masks the episode (``model_error``,
not retried) whatever the agent made of it; an agent that crashed, or never called the
model through the proxy, is an infrastructure failure (``agent_error``, or the envhub
code of an MCP error behind the crash, e.g. ``sandbox_error``): retried on a fresh
session like an environment failure, then masked. A prompt that outgrew the context
after the first call ends the episode with ``stop_reason="context_length"``.
"""

from __future__ import annotations

import secrets
from typing import Any, cast

from envhub.agents.base import AgentCrashed, AgentEpisode, AgentRunner
from envhub.agents.proxy import CapturedCall, CaptureProxy, ChatUpstream
from envhub.agents.session_log import LoggedSession, session_calls
from envhub.errors import ContextLengthExceeded, InvalidRequest
from envhub.policies.base import Policy
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.rollout.episode import (
    EpisodeRecord,
    EpisodeRunner,
    EpisodeSpec,
    ModelFailure,
    record_turn,
)

__all__ = ["AgentEpisodeRunner", "AgentLoop"]


class AgentLoop:
    """The :class:`~envhub.rollout.episode.TurnLoop` in which ``agent`` plays each
    episode, its model calls going to the runner's policy's endpoints through a capture
    proxy. The policy must forward caller-built requests (:class:`ChatUpstream`: the
    ``openai`` policy); the runner's ``max_turns`` is also the agent's own turn cap."""

    def __init__(self, agent: AgentRunner) -> None:
        self.agent = agent

    def check(self, policy: Policy) -> None:
        if not isinstance(policy, ChatUpstream):
            raise InvalidRequest(
                f"an external agent calls an OpenAI-compatible endpoint through envhub's "
                f"capture proxy, which forwards to the openai policy only, not to "
                f"{type(policy).__name__}: use --policy openai with --base-url"
            )

    async def play(
        self,
        runner: EpisodeRunner,
        spec: EpisodeSpec,
        record: EpisodeRecord,
        session: SessionHandle,
    ) -> str | None:
        from envhub.mcp.door import serve_session_mcp

        upstream = cast("ChatUpstream", runner.policy)  # check() refused any other policy
        start = await session.reset()
        crash: Exception | None = None
        mcp_token = secrets.token_urlsafe(32)
        async with CaptureProxy(
            upstream,
            policy_version=runner.policy_version,
            episode_id=record.trajectory_id,
            group_id=spec.group_id,
        ) as proxy:
            logged = LoggedSession(session, replies_sent=lambda: len(proxy.calls))
            async with serve_session_mcp(
                logged, start, env_name=runner.env.name, token=mcp_token
            ) as mcp_url:
                episode = AgentEpisode(
                    task_id=spec.task_id,
                    messages=list(start.messages),
                    mcp_url=mcp_url,
                    mcp_token=mcp_token,
                    base_url=proxy.base_url,
                    api_key=proxy.api_key,
                    model=upstream.model,
                    max_turns=runner.max_turns,
                )
                try:
                    await self.agent.run(episode)
                except Exception as exc:  # judged below, after the proxy's record
                    crash = exc
        _record_calls(record, proxy.calls)
        record.session_calls = session_calls(logged.calls, proxy.calls)
        failure = proxy.failure
        if failure is not None:
            if isinstance(failure, ContextLengthExceeded) and proxy.calls:
                return "context_length"
            raise ModelFailure(f"{type(failure).__name__}: {failure}") from failure
        if crash is not None:
            raise _crashed(self.agent.name, crash) from crash
        if not proxy.calls:
            raise AgentCrashed(
                f"{self.agent.name} finished without calling the model through the capture "
                "proxy (it must use AgentEpisode.base_url and api_key)"
            )
        return await _finish(runner, record, logged, proxy.calls[-1])


class AgentEpisodeRunner(EpisodeRunner):
    """An :class:`~envhub.rollout.episode.EpisodeRunner` whose episodes ``agent`` plays
    (:class:`AgentLoop`); ``options`` are the runner's."""

    def __init__(
        self, env: EnvironmentClient, policy: Policy, agent: AgentRunner, **options: Any
    ) -> None:
        super().__init__(env, policy, turn_loop=AgentLoop(agent), **options)


async def _finish(
    runner: EpisodeRunner, record: EpisodeRecord, session: SessionHandle, last: CapturedCall
) -> str | None:
    """Hand a final answer to a session the agent left open; the stop override."""
    info = await session.info()
    record.env_s += info.metrics.env_s
    if info.done:
        return None
    if not last.completion.tool_calls:
        await session.step([], content=last.completion.content)
        return None
    if runner.max_turns is not None and len(record.turns) >= runner.max_turns:
        return "max_turns"
    return None


def _crashed(agent_name: str, crash: Exception) -> AgentCrashed:
    """The agent's crash as an infrastructure error. Where an MCP error from the door is
    behind it (the environment, its sandbox or the transport failed), it keeps envhub's
    error code from the error's ``data.code`` (``sandbox_error``, ...), as the rollout
    loop's masked trajectory would; otherwise the code is ``agent_error``."""
    from mcp.shared.exceptions import MCPError

    error: BaseException | None = crash
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        data = error.data if isinstance(error, MCPError) else None
        if isinstance(data, dict) and isinstance(data.get("code"), str):
            return AgentCrashed(f"{agent_name}: {type(crash).__name__}: {crash}", code=data["code"])
        error = error.__cause__ or error.__context__
    return AgentCrashed(f"{agent_name}: {type(crash).__name__}: {crash}")


def _record_calls(record: EpisodeRecord, calls: list[CapturedCall]) -> None:
    """The proxy's calls as turns, and the last call's chat as the episode's messages."""
    previous_ids: list[int] | None = None
    for call in calls:
        previous_ids = record_turn(
            record, call.completion, previous_ids, message_index=len(call.messages),
            latency_s=call.latency_s, policy_version=call.policy_version,
        )  # fmt: skip
    if calls:
        last = calls[-1]
        record.messages = [*last.messages, last.completion.to_message()]
        record.tools = last.tools or record.tools
