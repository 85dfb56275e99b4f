"""``envhub.connect``: the one resolver from "where the environment is" to an
:class:`~envhub.protocol.EnvironmentClient`.

    envhub.connect("calc")                                   # in-process (a plugin name)
    envhub.connect("my_pkg.envs:MyEnv")                      # in-process, by module:Class
    envhub.connect(MyEnv, budgets=Budgets(max_turns=4))      # in-process, a class
    envhub.connect("http://10.0.0.5:8000", "calc")           # one `envhub serve` server
    envhub.connect(["http://a:8000", "http://b:8000"], "calc")  # a pool of servers
    envhub.connect("ray://10.0.0.1:6379", "calc")            # an `envhub fleet` on Ray
    envhub.connect(client)                                   # a ready client, as it is

The CLI (``--env-url``, ``--env-fleet``), the trainer adapters and the gymnasium adapter
all resolve through it, so each of them reaches every transport. Input that names no
transport, or options a transport cannot honour (budgets of a server's environment, a
token for an in-process one), is an :class:`~envhub.errors.InvalidRequest` naming the fix.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from envhub.budgets import Budgets
from envhub.clients.local import LocalEnvironment
from envhub.environment import Environment
from envhub.errors import InvalidRequest
from envhub.protocol import EnvironmentClient
from envhub.registry import load_environment_class

if TYPE_CHECKING:
    from envhub.clients.remote import SessionTransport

__all__ = ["FLEET_SCHEME", "connect", "make_keywords"]

FLEET_SCHEME = "ray://"
_SERVER_SCHEMES = ("http://", "https://")
_FORMS = (
    "a plugin name, 'module:Class', an Environment class, an `envhub serve` URL "
    "(http[s]://HOST:PORT), a list of such URLs (a pool), 'ray://HOST:PORT' (the Ray head "
    "of an `envhub fleet`) or an EnvironmentClient"
)


def connect(
    where: str | Sequence[str] | type[Environment] | EnvironmentClient,
    env: str | None = None,
    *,
    options: Mapping[str, Any] | None = None,
    budgets: Budgets | None = None,
    token: str | None = None,
    transport: SessionTransport | None = None,
    namespace: str | None = None,
) -> EnvironmentClient:
    """The environment client for ``where`` (the forms are in the module docstring).

    ``env`` names the hosted environment on a server, pool or fleet (required there; in
    process ``where`` names it, so ``env`` may only repeat that name). ``options`` are
    the environment's options (a server checks them against what its operator allows).
    ``budgets``: in-process only, the fields set override the environment's own
    (:meth:`Budgets.over`); a hosted environment's budgets are its server's. ``token``
    and ``transport`` (``"ws"`` or ``"http"``; the default is
    :data:`~envhub.clients.remote.DEFAULT_TRANSPORT`) are a server's, pool's or fleet's;
    ``namespace`` is the fleet's Ray namespace (default ``"envhub"``). A ready client
    comes back as it is and takes none of these: it was configured when it was built.
    """
    if isinstance(where, str) and where.startswith(FLEET_SCHEME):
        return _fleet(where.removeprefix(FLEET_SCHEME), _hosted_name(where, env, budgets),
                      options, token, _checked(transport), namespace or "envhub")  # fmt: skip
    if namespace is not None:
        raise InvalidRequest(f"namespace= is a Ray fleet's: give 'ray://HOST:PORT', not {where!r}")
    if isinstance(where, str) and "://" not in where:
        return _local(load_environment_class(where), where, env, options, budgets, token, transport)
    if inspect.isclass(where) and issubclass(where, Environment):
        return _local(where, where.name or where.__name__, env, options, budgets, token, transport)
    urls = [where] if isinstance(where, str) else where
    if isinstance(urls, Sequence) and all(isinstance(url, str) for url in urls):
        return _servers(list(urls), env, options, budgets, token, _checked(transport))
    if isinstance(where, EnvironmentClient):
        given = {"env": env, "options": options or None, "budgets": budgets, "token": token,
                 "transport": transport}  # fmt: skip
        if set_ := [name for name, value in given.items() if value is not None]:
            raise InvalidRequest(
                f"{', '.join(set_)}: a ready client is used as it is (its environment, "
                "options and connection were set when it was built); drop them or pass "
                "where the environment is instead"
            )
        return where
    raise InvalidRequest(f"connect() takes {_FORMS}; got {where!r}")


def make_keywords(keywords: Mapping[str, Any]) -> tuple[dict[str, Any], Budgets | None]:
    """:func:`envhub.make`-style keywords split into environment options and budgets:
    ``budgets=`` and the :class:`Budgets` field names (``max_turns=``...) are budgets,
    every other keyword is an option. For the adapters whose signatures take ``**kwargs``
    as ``make`` does (the trainers', gymnasium's)."""
    budget_names = {"budgets", *Budgets.model_fields}
    options = {k: v for k, v in keywords.items() if k not in budget_names}
    fields = {k: v for k, v in keywords.items() if k in Budgets.model_fields and v is not None}
    budgets: Budgets | None = keywords.get("budgets")
    if fields:
        budgets = budgets.merged(**fields) if budgets else Budgets.model_validate(fields)
    return options, budgets


def _checked(transport: str | None) -> SessionTransport | None:
    if transport not in (None, "ws", "http"):
        raise InvalidRequest(f'transport is "ws" (pooled WebSockets) or "http", not {transport!r}')
    return transport  # type: ignore[return-value]  # narrowed by the test above


def _hosted_name(where: object, env: object, budgets: Budgets | None) -> str:
    if not isinstance(env, str) or not env:
        raise InvalidRequest(
            f"{where!r} hosts environments by name: say which one, connect({where!r}, 'calc')"
        )
    if budgets is not None:
        raise InvalidRequest(
            "budgets: a hosted environment's budgets are set by its server (envhub serve "
            "--max-turns ...); cap turns on the caller's side (rollout.run(max_turns=...))"
        )
    return env


def _local(
    cls: type[Environment],
    name: str,
    env: str | None,
    options: Mapping[str, Any] | None,
    budgets: Budgets | None,
    token: str | None,
    transport: str | None,
) -> LocalEnvironment:
    """An in-process environment; what only a server takes is refused, not ignored."""
    if env is not None and env not in (name, cls.name):
        raise InvalidRequest(
            f"env={env!r} names another environment than {name!r}; in-process the first "
            "argument says which one: drop env="
        )
    for given, value in (("token", token), ("transport", transport)):
        if value is not None:
            raise InvalidRequest(
                f"{given}= is for a server, pool or fleet; {name!r} runs in-process: drop it "
                "or pass the server's URL"
            )
    own = budgets.over(cls.budgets) if budgets else None
    return LocalEnvironment(cls, dict(options or {}), own)


def _servers(
    urls: list[str],
    env: str | None,
    options: Mapping[str, Any] | None,
    budgets: Budgets | None,
    token: str | None,
    transport: SessionTransport | None,
) -> EnvironmentClient:
    """One server's client, or a pool over several (each session on one replica)."""
    if not urls:
        raise InvalidRequest("an empty list of server URLs: give at least one")
    if bad := [url for url in urls if not url.startswith(_SERVER_SCHEMES)]:
        raise InvalidRequest(
            f"not a server URL: {', '.join(map(repr, bad))}; a server is "
            "http[s]://HOST:PORT, a fleet 'ray://HOST:PORT' (one, not in a list)"
        )
    name = _hosted_name(urls[0] if len(urls) == 1 else urls, env, budgets)
    from envhub.clients.pooled import PooledEnvironment
    from envhub.clients.remote import RemoteEnvironment

    try:  # the clients refuse what they cannot run (a URL listed twice) with ValueError
        if len(urls) > 1:
            return PooledEnvironment(urls, name, dict(options or {}), token=token,
                                     transport=transport)  # fmt: skip
        return RemoteEnvironment(urls[0], name, dict(options or {}), token=token,
                                 transport=transport)  # fmt: skip
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


def _fleet(
    address: str,
    env: str,
    options: Mapping[str, Any] | None,
    token: str | None,
    transport: SessionTransport | None,
    namespace: str,
) -> EnvironmentClient:
    """The replicas of ``env`` in the fleet whose Ray head (GCS) is at ``address``, the
    address ``envhub fleet up --address`` took (joining the cluster happens here)."""
    try:
        from envhub.clients.fleet import FleetEnvironment
    except ImportError as exc:
        raise InvalidRequest(
            f"a ray:// fleet needs Ray ({exc.name} is missing): pip install 'envhub-rl[ray]'"
        ) from None
    return FleetEnvironment(address, env, dict(options or {}), namespace=namespace, token=token,
                            transport=transport)  # fmt: skip
