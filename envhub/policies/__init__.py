"""Policies: what produces the assistant messages of an episode.

``openai`` (OpenAI-compatible endpoints, load-balanced, token ids where the server
returns them), ``tito`` (token-in/token-out: envhub renders and extends the prompt ids
itself, :mod:`envhub.policies.tito`), ``litellm`` (any litellm provider) and
``reference`` (gold-action replay).
Policy modules load on first use, so importing this package costs nothing.
"""

from __future__ import annotations

import os
from importlib import import_module
from typing import Any

from envhub.errors import InvalidRequest
from envhub.policies.base import Completion as Completion
from envhub.policies.base import GenerateRequest as GenerateRequest
from envhub.policies.base import Policy as Policy
from envhub.policies.base import SamplingParams as SamplingParams
from envhub.policies.retry import RetryPolicy as RetryPolicy

__all__ = [
    "POLICY_KINDS",
    "Completion",
    "GenerateRequest",
    "LiteLLMPolicy",
    "NoopPolicy",
    "OpenAIPolicy",
    "Policy",
    "ReferencePolicy",
    "RetryPolicy",
    "SamplingParams",
    "TitoPolicy",
    "make_policy",
]

_LAZY = {
    "OpenAIPolicy": "envhub.policies.openai_compat",
    "LiteLLMPolicy": "envhub.policies.litellm_policy",
    "ReferencePolicy": "envhub.policies.reference",
    "NoopPolicy": "envhub.policies.reference",
    "TitoPolicy": "envhub.policies.tito",
}

POLICY_KINDS = ("openai", "tito", "litellm", "reference")


def make_policy(
    kind: str,
    *,
    model: str | None = None,
    base_urls: list[str] | None = None,
    sampling: SamplingParams | None = None,
    **options: Any,
) -> Policy:
    """Build a policy by kind; ``options`` go to its constructor (e.g. ``api_key``).

    ``tito`` takes ``tokenizer``: a tokenizer object, or a model directory or GGUF file
    loaded with :func:`envhub.tokens.tokenizers.load_tokenizer` (and ``chat_template``, a Jinja
    file replacing its template)."""
    urls = list(base_urls or [])
    if kind == "reference":
        from envhub.policies.reference import ReferencePolicy

        return ReferencePolicy(**options)
    if not model:
        raise InvalidRequest(f"the {kind} policy needs a model name (--model)")
    if kind == "openai":
        if not urls:
            raise InvalidRequest("the openai policy needs at least one --base-url")
        from envhub.policies.openai_compat import OpenAIPolicy

        return OpenAIPolicy(model, urls, sampling=sampling, **options)
    if kind == "tito":
        return _tito_policy(model, urls, sampling, options)
    if kind == "litellm":
        if len(urls) > 1:
            raise InvalidRequest("the litellm policy takes at most one --base-url (api_base)")
        from envhub.policies.litellm_policy import LiteLLMPolicy

        return LiteLLMPolicy(
            model, base_url=urls[0] if urls else None, sampling=sampling, **options
        )
    raise InvalidRequest(f"unknown policy {kind!r}; choose one of {', '.join(POLICY_KINDS)}")


def _tito_policy(
    model: str, urls: list[str], sampling: SamplingParams | None, options: dict[str, Any]
) -> Policy:
    if not urls:
        raise InvalidRequest("the tito policy needs at least one --base-url")
    tokenizer = options.pop("tokenizer", None)
    chat_template = options.pop("chat_template", None)
    if tokenizer is None:
        raise InvalidRequest("the tito policy needs the model's tokenizer (--tokenizer)")
    if isinstance(tokenizer, (str, os.PathLike)):
        from envhub.tokens.tokenizers import load_tokenizer

        tokenizer = load_tokenizer(tokenizer, chat_template=chat_template)
    elif chat_template is not None:
        raise InvalidRequest("chat_template goes with a tokenizer path, not a tokenizer object")
    from envhub.policies.tito import TitoPolicy

    return TitoPolicy(model, urls, tokenizer, sampling=sampling, **options)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envhub.policies' has no attribute {name!r}")
