"""SkyRL: an envhub session behind ``skyrl-gym``'s text environment interface.

SkyRL's generator keeps the token ids itself (it appends the sampled ids and templates
only the new observation messages), so the environment only sees text: ``init(prompt)``
returns the first messages and ``step(action_text)`` returns the observation messages,
the reward and ``done``. :class:`EnvhubSkyRLEnv` parses the tool calls out of the text
(hermes ``<tool_call>`` blocks by default), runs them through one envhub session (local
or remote), and returns each step's reward: the environment's reward for the turn
(:meth:`envhub.Environment.turn_reward`, 0.0 without one, also in
``metadata["turn_reward"]``), plus envhub's episode reward on the step that ends the
episode, so an episode's step rewards sum to its undiscounted return
(:mod:`envhub.trainers.turn_rewards`).

Register it once, then name it in the dataset's ``env_class`` column::

    from envhub.trainers.skyrl import register
    register()  # skyrl_gym id "envhub"
    # dataset row: {"prompt": [...], "env_class": "envhub",
    #               "env_extras": {"task_id": "calc-0-00001"}}
    # SkyRL config: environment.skyrl_gym.envhub = {"env": "calc"} (or a server URL +
    #               "env_name"), passed to the constructor as ``env_config``.

Infra failures (sandbox, transport, environment code) are raised as the envhub error,
never turned into a zero reward: SkyRL's generator then fails or retries the rollout.

User turns (:meth:`envhub.Environment.next_user_turn`) come back as ``user`` messages
after the step's tool messages, so SkyRL templates them like any observation and masks
them out of the loss. SkyRL renders the tools once per episode: a tool list a user turn
changed is reported in the step's ``metadata["tools"]`` only, and calls to the new tools
work although the prompt does not list them.

Per-token policy versions (:attr:`~envhub.trajectory.Turn.completion_versions`) do not
pass through this adapter, because there are none on this side to pass: SkyRL's generator
samples every token on its own inference engines and builds ``GeneratorOutput``
(``response_ids``, ``loss_masks``, ``rollout_logprobs``) itself, while this environment
only ever sees decoded action text. Which weights sampled which token is known to SkyRL's
generator alone, and an off-policy correction for its weight updates belongs there; the
envhub-side adapters that do hand tokens to a trainer (:mod:`envhub.trainers.verl`,
:mod:`envhub.trainers.trl_rollout`, :mod:`envhub.trainers.grpo`) carry the versions.

Trees: for the same reason the environment side never sees a tree (SkyRL's generator
plays one episode per environment object and cannot fork it). Tree rollouts
(``envhub.rollout.run(tree=...)`` or the stream, e.g. inside a custom SkyRL generator)
reach SkyRL through :func:`generator_output`, which builds the fields of SkyRL's
``GeneratorOutput`` from envhub trajectories, from the ids the model server sampled.
With ``tree="treerl"`` its ``rewards`` are per token (the per-node advantages of
:mod:`envhub.trainers.tree_advantages` on trained tokens, 0 elsewhere; SkyRL's per-token
reward form) and ``loss_masks`` leave a child's shared turns untrained. SkyRL's own
GRPO/RLOO estimators sum a sequence's token rewards into one score before comparing it
within the group: per-node advantages need an estimator that returns the token rewards
as the advantages, registered with SkyRL's ``register_advantage_estimator`` (not shipped
here: its signature differs between SkyRL releases). Without ``tree``, ``rewards`` are
the episodes' and every leaf is trained whole (the flat baseline).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from envhub.errors import InvalidRequest
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.runtime.sync import run_sync
from envhub.tokens.tool_call_parsers import ToolParser, parse_hermes
from envhub.trainers.environments import resolve_environment, start_messages
from envhub.trainers.token_rows import TokenRow, trajectory_rows
from envhub.trainers.tree_advantages import (
    TreeEstimator,
    batch_turn_advantages,
    broken_trees,
    row_token_advantages,
)
from envhub.trainers.turn_rewards import row_token_rewards, turn_rewards
from envhub.trajectory import Trajectory
from envhub.types import Message

__all__ = [
    "SKYRL_ENV_ID",
    "EnvhubSkyRLEnv",
    "close_environments",
    "generator_output",
    "register",
]

SKYRL_ENV_ID = "envhub"
_ENVIRONMENTS: dict[str, EnvironmentClient] = {}  # one per config, shared by episodes
_MAX_TURNS: weakref.WeakKeyDictionary[EnvironmentClient, int] = weakref.WeakKeyDictionary()


def _config_value(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)  # omegaconf DictConfig / dataclass configs


def _session_factory(config: Any) -> EnvironmentClient:
    env = _config_value(config, "env")
    if env is None:
        raise InvalidRequest("the envhub SkyRL env needs env_config.env (a plugin name or URL)")
    if not isinstance(env, str) and isinstance(env, Sequence):  # several servers (a list,
        env = [str(url) for url in env]  # or omegaconf's ListConfig)
    elif not isinstance(env, str):
        return resolve_environment(env)  # an already built client, or an environment class
    hosted = isinstance(env, list) or "://" in env
    env_name = _config_value(config, "env_name")
    options = dict(_config_value(config, "options") or {})
    max_turns = _config_value(config, "max_turns")
    key = repr((env, env_name, sorted(options.items()), max_turns))
    if key not in _ENVIRONMENTS:
        extra = {"max_turns": max_turns} if max_turns is not None and not hosted else {}
        _ENVIRONMENTS[key] = resolve_environment(
            env,
            env_name=env_name,
            options=options,
            token=_config_value(config, "token"),
            **extra,
        )
    return _ENVIRONMENTS[key]


class EnvhubSkyRLEnv(BaseTextEnv):
    """One envhub episode as a ``skyrl_gym`` text environment.

    ``env_config``: ``env`` (anything :func:`envhub.connect` takes: a plugin name, a
    server URL, a list of them, ``ray://HOST:PORT``, an environment object), ``env_name``
    (with a URL), ``options``, ``max_turns``, ``token``. ``extras``:
    ``task_id`` (required). ``tool_parser`` turns action text into tool calls.
    """

    def __init__(
        self,
        env_config: Any = None,
        extras: dict[str, Any] | None = None,
        *,
        tool_parser: ToolParser = parse_hermes,
    ) -> None:
        super().__init__()
        extras = dict(extras or {})
        if "task_id" not in extras:
            raise InvalidRequest("the envhub SkyRL env needs extras['task_id'] (env_extras)")
        self.task_id = str(extras["task_id"])
        self.environment = _session_factory(env_config)
        self.tool_parser = tool_parser
        self.max_turns = int(  # informational: the envhub session enforces its own budget
            extras.get("max_turns")
            or _config_value(env_config, "max_turns")
            or _budget_max_turns(self.environment)
        )
        self.session: SessionHandle | None = None
        self._unfinished = False  # the session is open and not yet scored
        self.reward: float | None = None
        self.components: dict[str, float] = {}
        self.stop_reason: str | None = None

    def init(self, prompt: list[Message] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Open the session; the session's first messages replace the dataset prompt
        (they are what the environment actually shows the model)."""
        self.session = run_sync(self.environment.open(self.task_id))
        self._unfinished = True
        messages = run_sync(start_messages(self.session))
        return messages, {"task_id": self.task_id, "session_id": self.session.session_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.session is None:
            self.init()
        assert self.session is not None
        self.turns += 1
        parsed = self.tool_parser(action)
        result = run_sync(self.session.step(parsed.tool_calls, content=parsed.content))
        observations: list[Message] = [
            {"role": "tool", "content": o.content, "tool_call_id": o.tool_call_id, "name": o.name}
            for o in result.observations
        ]
        observations.extend(result.user_messages)  # a user turn: templated, never trained on
        metadata: dict[str, Any] = {
            "tool_calls": len(parsed.tool_calls),
            "tool_errors": sum(o.is_error for o in result.observations),
        }
        if result.tools is not None:
            metadata["tools"] = result.tools
        metadata["turn_reward"] = result.turn_reward
        turn_reward = result.turn_reward or 0.0
        if not result.done:
            return BaseTextEnvStepOutput(
                observations=observations, reward=turn_reward, done=False, metadata=metadata
            )
        self._unfinished = False
        closed = run_sync(self.session.close())
        self.reward, self.components = closed.reward, dict(closed.components)
        self.stop_reason = closed.stop_reason
        metadata.update(stop_reason=closed.stop_reason, reward_components=self.components)
        return BaseTextEnvStepOutput(
            observations=[], reward=turn_reward + closed.reward, done=True, metadata=metadata
        )

    def close(self) -> None:
        """Free an unfinished session without scoring it (SkyRL closes every env)."""
        if self.session is not None and self._unfinished:
            self._unfinished = False
            run_sync(self.session.abort())

    def get_metrics(self) -> dict[str, Any]:
        metrics: dict[str, Any] = {"turns": self.turns}
        if self.reward is not None:
            metrics["reward"] = self.reward
            metrics.update({f"reward/{k}": v for k, v in self.components.items()})
        return metrics


def _budget_max_turns(env: EnvironmentClient) -> int:
    """The environment's ``max_turns`` budget (from its ``info()``, asked once per
    environment: SkyRL builds one of these objects per episode)."""
    if env not in _MAX_TURNS:
        _MAX_TURNS[env] = run_sync(env.info()).budgets.max_turns
    return _MAX_TURNS[env]


def close_environments() -> None:
    """Close the session factories the adapter created (remote ones hold HTTP pools)."""
    while _ENVIRONMENTS:
        _, env = _ENVIRONMENTS.popitem()
        run_sync(env.aclose())


def register(env_id: str = SKYRL_ENV_ID) -> None:
    """Register :class:`EnvhubSkyRLEnv` with ``skyrl_gym`` under ``env_id`` (idempotent)."""
    import skyrl_gym

    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point="envhub.trainers.skyrl:EnvhubSkyRLEnv")


def generator_output(
    trajectories: Sequence[Trajectory],
    *,
    tree: TreeEstimator | None = None,
    turn_level: bool = False,
) -> dict[str, Any]:
    """The fields of SkyRL's ``GeneratorOutput`` for envhub trajectories (module
    docstring), one entry per trainable trajectory, in order: ``prompt_token_ids``,
    ``response_ids``, ``rewards``, ``loss_masks``, ``stop_reasons``,
    ``rollout_logprobs`` and ``rollout_metrics``, plus ``envhub_trajectory_ids``,
    ``envhub_tree_ids``, ``envhub_parent_ids`` and ``envhub_branch_turns`` to align them
    with the trajectories (SkyRL ignores keys it does not know).

    Masked trajectories are left out (SkyRL has no void reward: a 0 would count in the
    group's baseline), and with ``tree`` so are the other leaves of their tree (their
    nodes' values would be means over the leaves that happened not to fail). A
    trajectory whose turns drifted (:mod:`envhub.trainers.token_rows`) keeps its reward
    with ``loss_masks`` all 0. A compacted trajectory (:mod:`envhub.rollout.compaction`)
    gives one entry per context segment, each with the trajectory's reward (numbered
    in ``envhub_segments``). ``rollout_logprobs`` is ``None`` unless every trajectory
    recorded them. With ``tree`` every trajectory must belong to a group that holds a
    tree (SkyRL's rewards are all per trajectory or all per token).

    ``turn_level`` makes ``rewards`` per token from turn-level rewards: each turn's
    reward on the last token it sampled, the episode reward added at the last turn's
    (:func:`~envhub.trainers.turn_rewards.row_token_rewards`), 0 elsewhere: SkyRL's
    per-token reward form, whose returns its estimators compute. It does not combine
    with ``tree`` (whose per-token values are advantages).
    """
    if turn_level and tree is not None:
        raise InvalidRequest("generator_output takes tree= or turn_level=, not both")
    per_turn = batch_turn_advantages(trajectories, tree) if tree is not None else {}
    broken = broken_trees(trajectories) if tree is not None else {}
    kept = [t for t in trajectories if not t.masked and (t.tree_id or "") not in broken]
    if tree is not None and any(t.trajectory_id not in per_turn for t in kept):
        raise InvalidRequest(
            "generator_output(tree=...) takes tree rollouts only: SkyRL's rewards are "
            "either per trajectory or per token for the whole batch"
        )
    out: dict[str, Any] = {
        key: []
        for key in ("prompt_token_ids", "response_ids", "rewards", "loss_masks",
                    "stop_reasons", "rollout_logprobs", "envhub_trajectory_ids",
                    "envhub_tree_ids", "envhub_parent_ids", "envhub_branch_turns",
                    "envhub_segments")
    }  # fmt: skip
    rows = [
        (t, row)
        for t in kept
        for row in trajectory_rows(
            t, drift="mask", mask_shared_prefix=per_turn.get(t.trajectory_id) is not None
        )
    ]  # one per context segment of a compacted trajectory
    for t, row in rows:
        turns = per_turn.get(t.trajectory_id)
        cut = row.prompt_length
        mask = row.loss_mask[cut:] if row.mask_reason is None else [0] * (len(row) - cut)
        if turn_level:
            reward: float | list[float] = _token_rewards(t, row, cut)
        elif turns is None:
            reward = t.reward or 0.0
        else:
            advantages = row_token_advantages(row, turns)[cut:]
            reward = [a * m for a, m in zip(advantages, mask, strict=True)]
        out["prompt_token_ids"].append(row.input_ids[:cut])
        out["response_ids"].append(row.input_ids[cut:])
        out["rewards"].append(reward)
        out["loss_masks"].append(mask)
        out["stop_reasons"].append(t.stop_reason)
        out["rollout_logprobs"].append(row.old_logprobs[cut:])
        out["envhub_trajectory_ids"].append(t.trajectory_id)
        out["envhub_tree_ids"].append(t.tree_id)
        out["envhub_parent_ids"].append(t.parent_id)
        out["envhub_branch_turns"].append(t.branch_turn)
        out["envhub_segments"].append(row.segment)
    if not all(turn.completion_logprobs is not None for t in kept for turn in t.turns):
        out["rollout_logprobs"] = None
    out["rollout_metrics"] = None
    return out


def _token_rewards(trajectory: Trajectory, row: TokenRow, cut: int) -> list[float]:
    """``turn_level`` rewards of one response (one context segment's of a compacted
    trajectory): each turn's on its last sampled token; a drifted row (the trajectory's
    only one, no trained spans) keeps their sum on its last token, as the flat form keeps
    a drifted trajectory's reward."""
    per_turn = turn_rewards(trajectory)
    per_token = row_token_rewards(row, per_turn)[cut:]
    if row.mask_reason is not None and per_token:  # one row for the whole trajectory
        per_token[-1] = sum(per_turn)
    return per_token
