"""LLM judges: rewards a second model writes (:mod:`envhub.rewards.judge.base` says how a
request goes: cache, concurrency limit, retries, masking, the record in ``reward.info``).

- :class:`ReferenceJudge`: is the answer equivalent to the reference? (1 or 0)
- :class:`RubricJudge`: weighted criteria, each scored in [0, 1], each a component;
- :class:`GroupJudge`: the members of a GRPO group ranked in one request (RULER-style),
  through the rollout's group seam (``envhub.rollout.run(..., group_judge=)``).

The reference and rubric judges can be given :class:`JudgeTool` s, bound to the episode's
final state (its sandbox: :func:`sandbox_judge_tools` lists and reads its working tree), so
the judge model inspects that state instead of reading only the transcript.

A judge is given a :class:`JudgeEndpoint`; ``envhub.policies.judge.OpenAIJudgeEndpoint``
(any OpenAI-compatible server, from an operator's :class:`JudgeEndpointConfig`) is envhub's.
"""

from __future__ import annotations

from envhub.rewards.judge.base import Judge as Judge
from envhub.rewards.judge.base import JudgeCall as JudgeCall
from envhub.rewards.judge.base import JudgeEndpoint as JudgeEndpoint
from envhub.rewards.judge.base import JudgeEndpointConfig as JudgeEndpointConfig
from envhub.rewards.judge.base import JudgeReply as JudgeReply
from envhub.rewards.judge.base import JudgeTool as JudgeTool
from envhub.rewards.judge.base import UnparseableVerdict as UnparseableVerdict
from envhub.rewards.judge.base import Verdict as Verdict
from envhub.rewards.judge.base import aclose_shared_judges as aclose_shared_judges
from envhub.rewards.judge.base import fenced as fenced
from envhub.rewards.judge.base import parse_unit_score as parse_unit_score
from envhub.rewards.judge.base import shared_judge as shared_judge
from envhub.rewards.judge.group import GroupJudge as GroupJudge
from envhub.rewards.judge.group import GroupRanker as GroupRanker
from envhub.rewards.judge.group import parse_group_scores as parse_group_scores
from envhub.rewards.judge.reference import ReferenceJudge as ReferenceJudge
from envhub.rewards.judge.reference import parse_correctness as parse_correctness
from envhub.rewards.judge.rubric import Criterion as Criterion
from envhub.rewards.judge.rubric import RubricJudge as RubricJudge
from envhub.rewards.judge.rubric import parse_criteria as parse_criteria
from envhub.rewards.judge.sandbox_tools import sandbox_judge_tools as sandbox_judge_tools

__all__ = [
    "Criterion",
    "GroupJudge",
    "GroupRanker",
    "Judge",
    "JudgeCall",
    "JudgeEndpoint",
    "JudgeEndpointConfig",
    "JudgeReply",
    "JudgeTool",
    "ReferenceJudge",
    "RubricJudge",
    "UnparseableVerdict",
    "Verdict",
    "aclose_shared_judges",
    "fenced",
    "parse_correctness",
    "parse_criteria",
    "parse_group_scores",
    "parse_unit_score",
    "sandbox_judge_tools",
    "shared_judge",
]
