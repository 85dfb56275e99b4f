"""A question-answering environment scored by an LLM judge, for the judge tests and
``envhub rollout tests.judges.judge_envs:JudgedQA --env-arg judge=...``.

The judge's endpoint is the ``judge`` option (a
:class:`~envhub.rewards.judge.JudgeEndpointConfig` as JSON): an operator's ``--env-arg``,
never a server client's (it is not in ``client_options``). Every episode of a process
shares one judge per config (:func:`~envhub.rewards.judge.shared_judge`), so the cache
and the concurrency limit span them.
"""

from __future__ import annotations

from typing import Any

from envhub import Environment
from envhub.policies.judge import OpenAIJudgeEndpoint
from envhub.rewards.judge import (
    JudgeEndpointConfig,
    ReferenceJudge,
    RubricJudge,
    aclose_shared_judges,
    shared_judge,
)
from envhub.task import Task, TaskSet
from envhub.types import Reward

QUESTIONS = [
    ("What is the capital of France?", "Paris"),
    ("How many legs does a spider have?", "8"),
    ("What colour is a clear daytime sky?", "blue"),
    ("What is 6 times 7?", "42"),
]

CRITERIA = {"correct": "the answer agrees with the reference", "concise": "one short sentence"}


class JudgedQA(Environment):
    """Short questions; the final answer is judged against the reference
    (``mode="reference"``) or on :data:`CRITERIA` (``mode="rubric"``)."""

    name = "judged-qa"
    version = "0.1.0"

    def __init__(self, judge: dict[str, Any] | None = None, mode: str = "reference",
                 max_concurrency: int = 8) -> None:  # fmt: skip
        self.judge_config = None if judge is None else JudgeEndpointConfig.model_validate(judge)
        if mode not in ("reference", "rubric"):
            raise ValueError(f"mode is reference or rubric, not {mode!r}")
        self.mode = mode
        self.max_concurrency = max_concurrency

    def load_tasks(self) -> TaskSet:
        return TaskSet(
            Task(id=f"q{i}", prompt=[{"role": "user", "content": q}], answer=a, split="test")
            for i, (q, a) in enumerate(QUESTIONS)
        )

    def judge(self) -> ReferenceJudge | RubricJudge:
        config = self.judge_config
        if config is None:
            raise ValueError("judged-qa needs its judge: --env-arg judge='{\"base_urls\": "
                             "[URL], \"model\": NAME}'")  # fmt: skip
        key = (self.mode, self.max_concurrency, config)

        def build() -> ReferenceJudge | RubricJudge:
            endpoint = OpenAIJudgeEndpoint(config)
            if self.mode == "rubric":
                return RubricJudge(endpoint, CRITERIA, max_concurrency=self.max_concurrency)
            return ReferenceJudge(endpoint, max_concurrency=self.max_concurrency)

        return shared_judge(key, build)

    async def reward(self) -> Reward:
        question = self.task.prompt[0]["content"]
        verdict = await self.judge().judge(
            question=question, reference=str(self.task.answer), answer=self.final_answer or ""
        )
        return verdict.reward()

    @classmethod
    async def aclose_shared(cls) -> None:
        await aclose_shared_judges()
