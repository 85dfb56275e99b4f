"""Where a command's environment runs: in-process, on one ``envhub serve`` server, on a
static pool of them, or on a Ray fleet (``--env-url`` once or repeated, ``--env-fleet``).

Shared by ``envhub rollout`` and ``envhub check``. Every remote form gives task ids and
each session's first messages, never a task's gold data; the commands that replay gold
actions (``--policy reference``, ``check``) read tasks from a local copy of the same
plugin (:func:`local_task_source`), which must be the version the servers run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envhub.errors import InvalidRequest

if TYPE_CHECKING:
    from envhub.clients.remote import SessionTransport
    from envhub.protocol import EnvironmentClient

__all__ = [
    "EnvFleetOption",
    "EnvTarget",
    "EnvTokenOption",
    "EnvUrlOption",
    "FleetNamespaceOption",
    "local_task_source",
]

EnvUrlOption = Annotated[
    list[str] | None,
    typer.Option(
        "--env-url",
        help="use an `envhub serve` server; repeat for a pool: each session goes to the "
        "least-loaded healthy server and stays there",
    ),
]
EnvFleetOption = Annotated[
    str | None,
    typer.Option(
        "--env-fleet",
        help="use the replicas of an envhub fleet on the Ray cluster at this address "
        "(`envhub fleet up`; pip install 'envhub-rl[ray]')",
    ),
]
FleetNamespaceOption = Annotated[
    str, typer.Option("--fleet-namespace", help="with --env-fleet: the fleet's Ray namespace")
]
EnvTokenOption = Annotated[
    str | None,
    typer.Option(envvar="ENVHUB_TOKEN", show_envvar=True, help="the servers' bearer token"),
]


@dataclass(frozen=True)
class EnvTarget:
    """The environment-location options of one command, as given."""

    env_urls: list[str]
    env_fleet: str | None = None
    fleet_namespace: str = "envhub"
    transport: SessionTransport | None = None  # None: the client's default
    token: str | None = None

    def __post_init__(self) -> None:
        if self.env_urls and self.env_fleet:
            raise InvalidRequest("--env-url and --env-fleet both say where the environment "
                                 "runs: give one")

    @property
    def remote(self) -> bool:
        return bool(self.env_urls or self.env_fleet)

    def open(self, env: str, options: dict[str, Any], max_turns: int | None = None
             ) -> EnvironmentClient:
        """The environment client, through :func:`envhub.connect`. ``max_turns`` is the
        in-process sessions' budget; a server's budgets are its operator's (a client
        cannot raise them)."""
        from envhub.budgets import Budgets
        from envhub.clients.connect import FLEET_SCHEME, connect

        if self.env_fleet:
            address = self.env_fleet.removeprefix(FLEET_SCHEME)
            return connect(FLEET_SCHEME + address, env, options=options, token=self.token,
                           transport=self.transport, namespace=self.fleet_namespace)
        if self.env_urls:
            return connect(self.env_urls, env, options=options, token=self.token,
                           transport=self.transport)
        return connect(env, options=options,
                       budgets=None if max_turns is None else Budgets(max_turns=max_turns))


async def local_task_source(
    env: str, options: dict[str, Any], remote: EnvironmentClient
) -> EnvironmentClient:
    """A local copy of ``env`` (same options) to read whole tasks from, refused unless it
    is the version ``remote`` runs: another version's gold actions would score wrongly."""
    from envhub.clients.connect import connect

    local = connect(env, options=options)
    served = (await remote.info()).version
    if local.version != served:
        await local.aclose()
        raise InvalidRequest(
            f"the servers run {env} {served} but {local.version} is installed here; gold "
            "actions are read from the local plugin, so install the servers' version"
        )
    return local
