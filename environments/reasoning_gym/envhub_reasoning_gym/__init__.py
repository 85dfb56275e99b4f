"""envhub-rl-reasoning-gym: every Reasoning Gym dataset, scored by its own ``score_answer``."""

from envhub_reasoning_gym.catalog import NOT_CHECKABLE as NOT_CHECKABLE
from envhub_reasoning_gym.catalog import all_datasets as all_datasets
from envhub_reasoning_gym.catalog import default_datasets as default_datasets
from envhub_reasoning_gym.env import ReasoningGymEnv as ReasoningGymEnv
from envhub_reasoning_gym.screen import EVALUATING_DATASETS as EVALUATING_DATASETS
from envhub_reasoning_gym.screen import UNPARSEABLE as UNPARSEABLE
from envhub_reasoning_gym.screen import plain_expression as plain_expression
from envhub_reasoning_gym.screen import refusal as refusal

__all__ = [
    "EVALUATING_DATASETS",
    "NOT_CHECKABLE",
    "UNPARSEABLE",
    "ReasoningGymEnv",
    "all_datasets",
    "default_datasets",
    "plain_expression",
    "refusal",
]
