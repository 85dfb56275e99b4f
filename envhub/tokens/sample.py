"""What a token-in/token-out sampler returns, shared by the ``tito`` policy, the
:class:`~envhub.policies.token_policy.TokenPolicy` and the trainers' samplers.

It lives with the token plumbing, below both policies and trainers, so that neither has
to import the other for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Sample", "Sampler"]


@dataclass(frozen=True, slots=True)
class Sample:
    """What a sampler returns: the sampled ids (ending at EOS when ``finished``) and the
    logprob of each under the distribution it was drawn from. ``aborted``: the server
    ended the request early (a weight update) and the ids are a partial completion."""

    token_ids: list[int]
    logprobs: list[float] | None
    finished: bool
    aborted: bool = False


Sampler = Callable[[list[int]], Awaitable[Sample]]
