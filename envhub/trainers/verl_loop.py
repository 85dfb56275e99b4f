"""``EnvhubAgentLoop``: a verl agent loop running one envhub episode per prompt.

Imports verl (``verl.experimental.agent_loop``), so it is only importable inside a verl
installation; the conversion it relies on lives in :mod:`envhub.trainers.verl` and is
tested without verl. Constructor keywords come from the agent-loop config entry
(``env``, ``env_name``, ``env_options``, ``token``, ``max_turns``); each dataset row
names its task in ``extra_info.task_id`` (or a top-level ``task_id``), and its ``uid``
(verl's GRPO group key) becomes the envhub ``group_id``.
"""

from __future__ import annotations

import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
)

from envhub.errors import InvalidRequest
from envhub.policies.token_policy import TokenPolicy
from envhub.rollout import EpisodeRunner, EpisodeSpec
from envhub.trainers.environments import resolve_environment
from envhub.trainers.verl import agent_loop_output, verl_sampler
from envhub.trajectory import EnvRef

__all__ = ["EnvhubAgentLoop"]


class EnvhubAgentLoop(AgentLoopBase):
    def __init__(
        self,
        *args: Any,
        env: Any,
        env_name: str | None = None,
        env_options: dict[str, Any] | None = None,
        token: str | None = None,
        max_turns: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.environment = resolve_environment(
            env, env_name=env_name, options=dict(env_options or {}), token=token
        )
        self.max_turns = max_turns  # the episode runner's cap, on every transport
        self._env_ref: EnvRef | None = None  # asked once, not per episode
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra_info = kwargs.get("extra_info") or {}
        task_id = kwargs.get("task_id") or extra_info.get("task_id")
        if task_id is None:
            raise InvalidRequest("envhub agent loop rows need extra_info.task_id")
        sampler = verl_sampler(
            self.server_manager,
            sampling_params,
            request_id=uuid.uuid4().hex,
            eos_token_ids={self.tokenizer.eos_token_id},
        )
        policy = TokenPolicy(sampler, self.tokenizer, name="verl", sampling=sampling_params)
        if self._env_ref is None:
            self._env_ref = EnvRef.of(self.environment.name, await self.environment.info())
        runner = EpisodeRunner(
            self.environment,
            policy,
            env_ref=self._env_ref,
            sampling=dict(sampling_params),
            max_turns=self.max_turns,
        )
        group = str(kwargs.get("uid") or task_id)
        trajectory = await runner.run(EpisodeSpec(str(task_id), 0, group))
        fields = agent_loop_output(trajectory, response_length=self.response_length)
        metrics = AgentLoopMetrics(
            generate_sequences=trajectory.timings.llm_s, tool_calls=trajectory.timings.env_s
        )
        return AgentLoopOutput(**fields, metrics=metrics)
