"""User models on the policy layer: the model that plays an episode's simulated user
(:mod:`envhub.users`) is a policy like the agent's, with the same client, retries,
balancing and ejection.

:class:`PolicyUserModel` puts any :class:`~envhub.policies.base.Policy` behind the
:class:`~envhub.users.UserModel` protocol; :func:`openai_user_model` is the ``openai``
factory of the ``envhub.user_models`` entry-point group, building an
:class:`~envhub.policies.openai_compat.OpenAIPolicy` from a
:class:`~envhub.users.UserEndpoint`. The environment reaches it through that group only,
so the plugin contract imports no model client.
"""

from __future__ import annotations

from envhub.errors import InvalidRequest
from envhub.policies.base import GenerateRequest, Policy, SamplingParams
from envhub.policies.openai_compat import OpenAIPolicy, api_key_from
from envhub.policies.retry import RetryPolicy
from envhub.users import UserEndpoint, UserRequest

__all__ = ["PolicyUserModel", "openai_user_model"]


class PolicyUserModel:
    """A :class:`~envhub.users.UserModel` that asks ``policy`` (offered no tools) and
    answers with its message's text; it closes the policy in :meth:`aclose`."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.model = policy.model

    async def reply(self, request: UserRequest) -> str:
        completion = await self.policy.generate(
            GenerateRequest(
                messages=request.messages,
                tools=[],
                turn=request.turn,
                task_id=request.task_id,
                sample_index=0,
            )
        )
        return completion.content or ""

    async def aclose(self) -> None:
        await self.policy.aclose()


def openai_user_model(endpoint: UserEndpoint) -> PolicyUserModel:
    """The ``openai`` user model (``envhub.user_models`` entry point): chat completions
    at ``endpoint.base_urls``, no token ids, ``endpoint.max_attempts`` tries of each
    request; the API key is read from the variable ``endpoint.api_key_env`` names (else
    ``OPENAI_API_KEY``, as for the agent's policy)."""
    if not endpoint.model or not endpoint.base_urls:
        raise InvalidRequest("the openai user model needs a model and base_urls")
    policy = OpenAIPolicy(
        endpoint.model,
        list(endpoint.base_urls),
        sampling=SamplingParams(temperature=endpoint.temperature, max_tokens=endpoint.max_tokens),
        token_ids="off",
        retry=RetryPolicy(max_attempts=endpoint.max_attempts, max_delay_s=5.0),
        api_key=api_key_from(endpoint.api_key_env, "the user endpoint"),
        request_timeout_s=endpoint.request_timeout_s,
    )
    return PolicyUserModel(policy)
