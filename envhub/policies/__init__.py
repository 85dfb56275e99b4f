"""Policies: what produces the assistant messages of an episode.

``openai`` (OpenAI-compatible endpoints, load-balanced, token ids where the server
returns them), ``tito`` (token-in/token-out: envhub renders and extends the prompt ids
itself, :mod:`envhub.policies.tito`), ``litellm`` (any litellm provider) and
``reference`` (gold-action replay), each registered in the ``envhub.policies``
entry-point group as a plugin's policy is (:func:`make_policy`, :mod:`envhub.policies.factory`).
Policy modules load on first use, so importing this package costs nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from envhub.policies.base import Completion as Completion
from envhub.policies.base import GenerateRequest as GenerateRequest
from envhub.policies.base import Policy as Policy
from envhub.policies.base import SamplingParams as SamplingParams
from envhub.policies.factory import POLICIES as POLICIES
from envhub.policies.factory import PolicyConfig as PolicyConfig
from envhub.policies.factory import TitoOptions as TitoOptions
from envhub.policies.factory import make_policy as make_policy
from envhub.policies.factory import policy_names as policy_names
from envhub.policies.retry import RetryPolicy as RetryPolicy

__all__ = [
    "POLICIES",
    "Completion",
    "GenerateRequest",
    "LiteLLMPolicy",
    "NoopPolicy",
    "OpenAIPolicy",
    "Policy",
    "PolicyConfig",
    "ReferencePolicy",
    "RetryPolicy",
    "SamplingParams",
    "TitoOptions",
    "TitoPolicy",
    "make_policy",
    "policy_names",
]

_LAZY = {
    "OpenAIPolicy": "envhub.policies.openai_compat",
    "LiteLLMPolicy": "envhub.policies.litellm_policy",
    "ReferencePolicy": "envhub.policies.reference",
    "NoopPolicy": "envhub.policies.reference",
    "TitoPolicy": "envhub.policies.tito",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envhub.policies' has no attribute {name!r}")
