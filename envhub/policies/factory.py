"""Building a policy by name: :func:`make_policy` finds the factory registered under that
name in the ``envhub.policies`` entry-point group (or named ``module:Name``) and hands it
one typed :class:`PolicyConfig`.

A factory is any callable ``(PolicyConfig) -> Policy``: envhub's own are the
``from_config`` class methods of its policies, registered in envhub's ``pyproject.toml``
exactly as a third party registers its own::

    [project.entry-points."envhub.policies"]
    mine = "my_package.policy:MyPolicy"   # MyPolicy(config: PolicyConfig)

so ``envhub rollout ENV --policy mine`` builds it from the same options the built-in
policies get.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import TYPE_CHECKING, Any

from envhub.errors import InvalidRequest
from envhub.policies.base import Policy, SamplingParams
from envhub.policies.retry import RetryPolicy
from envhub.registry import PluginKind, load_plugin, plugin_names

if TYPE_CHECKING:
    from envhub.policies.openai_compat import TokenIdMode
    from envhub.policies.tito.backends import TitoBackend
    from envhub.policies.transport import TransportOptions
    from envhub.tokens.tool_call_parsers import ToolParser

__all__ = [
    "POLICIES",
    "TITO_BACKENDS",
    "PolicyConfig",
    "PolicyFactory",
    "TitoOptions",
    "make_policy",
    "policy_names",
]


@dataclass(frozen=True)
class TitoOptions:
    """What the ``tito`` policy needs beyond a chat policy's options: the model's
    ``tokenizer`` (an object, or a model directory or GGUF file loaded with
    :func:`envhub.tokens.tokenizers.load_tokenizer`), a ``chat_template`` file replacing
    its template (with a path only), the server kind (``envhub.tito_backends``) and the
    tool-call parser (``envhub.tool_call_parsers``)."""

    tokenizer: Any = None
    chat_template: str | PathLike[str] | None = None
    backend: str | TitoBackend = "llama.cpp"
    tool_parser: str | ToolParser = "hermes"


def _no_transport_options() -> TransportOptions:
    return {}


@dataclass(frozen=True)
class PolicyConfig:
    """Everything a policy factory is given: the model and its servers, sampling, the
    retry policy for transient model errors (``None``: the default), the endpoint pool's
    connection options (``transport``, which also carries ``api_key`` and
    ``request_timeout_s``), and the options of the built-in kinds that have their own.
    A factory reads what it uses and checks what it needs with :meth:`require_model` and
    :meth:`require_base_urls`."""

    model: str | None = None
    base_urls: tuple[str, ...] = ()
    sampling: SamplingParams | None = None
    retry: RetryPolicy | None = None
    transport: TransportOptions = field(default_factory=_no_transport_options)
    token_ids: TokenIdMode = "auto"
    tito: TitoOptions = field(default_factory=TitoOptions)
    wrong_action_p: float = 0.0

    def require_model(self, kind: str) -> str:
        """The model name; :class:`InvalidRequest` naming ``--model`` when there is none."""
        if not self.model:
            raise InvalidRequest(f"the {kind} policy needs a model name (--model)")
        return self.model

    def require_base_urls(self, kind: str) -> list[str]:
        """The base URLs; :class:`InvalidRequest` naming ``--base-url`` when there are none."""
        if not self.base_urls:
            raise InvalidRequest(f"the {kind} policy needs at least one --base-url")
        return list(self.base_urls)


PolicyFactory = Callable[[PolicyConfig], Policy]

POLICIES: PluginKind[PolicyFactory] = PluginKind("envhub.policies", "policy")

TITO_BACKENDS: PluginKind[Callable[[], TitoBackend]] = PluginKind(
    "envhub.tito_backends", "TITO backend"
)
"""The ``envhub.tito_backends`` entry-point group: a backend class (built with no
arguments) by ``--tito-backend`` name (:func:`envhub.policies.tito.tito_backend`). It is
declared here, beside :class:`TitoOptions`, so that listing the names imports no policy."""


def policy_names() -> list[str]:
    """The installed policies' names (``--policy``), from metadata only."""
    return plugin_names(POLICIES)


def make_policy(
    kind: str,
    *,
    model: str | None = None,
    base_urls: Sequence[str] = (),
    sampling: SamplingParams | None = None,
    retry: RetryPolicy | None = None,
    transport: TransportOptions | None = None,
    token_ids: TokenIdMode = "auto",
    tito: TitoOptions | None = None,
    wrong_action_p: float = 0.0,
) -> Policy:
    """The policy registered as ``kind`` (``openai``, ``tito``, ``litellm``,
    ``reference``, a plugin's, or ``module:Name``), built from these options
    (:class:`PolicyConfig`); an unknown kind is an :class:`InvalidRequest` listing the
    installed ones."""
    factory = load_plugin(POLICIES, kind)
    config = PolicyConfig(
        model=model,
        base_urls=tuple(base_urls),
        sampling=sampling,
        retry=retry,
        transport=transport if transport is not None else _no_transport_options(),
        token_ids=token_ids,
        tito=tito if tito is not None else TitoOptions(),
        wrong_action_p=wrong_action_p,
    )
    policy = factory(config)
    if not isinstance(policy, Policy):
        raise InvalidRequest(f"policy {kind!r} built {policy!r}, which is not an envhub Policy")
    return policy
