"""Reusable, pure reward functions and a weighted ``Rubric``.

Environments compose these; every component a rubric computes is recorded next to the
final reward, so a trainer can see why an episode scored what it did.
"""

from __future__ import annotations

from envhub.rewards.rubric import Rubric as Rubric
from envhub.rewards.text import exact_match as exact_match
from envhub.rewards.text import f1 as f1
from envhub.rewards.text import normalize_answer as normalize_answer
from envhub.rewards.text import numeric_match as numeric_match
from envhub.rewards.text import parse_number as parse_number
from envhub.rewards.text import substring_match as substring_match

__all__ = [
    "Rubric",
    "exact_match",
    "f1",
    "normalize_answer",
    "numeric_match",
    "parse_number",
    "substring_match",
]
