"""``envhub fleet up|status|down``: environment-server replicas on a Ray cluster
(:mod:`envhub.fleet.control`; ``pip install 'envhub-rl[ray]'``, imported in the bodies)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envhub.cli._app import app
from envhub.cli.options import parse_env_args
from envhub.errors import FleetError

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["fleet_app", "parse_env_args_by_env", "parse_replica_counts", "parse_resources"]

fleet_app = typer.Typer(
    name="fleet",
    help="Environment-server replicas on a Ray cluster (needs the envhub ray extra).",
    no_args_is_help=True,
)

AddressOption = Annotated[
    str,
    typer.Option("--address", help="the Ray head's GCS address HOST:PORT (`ray start --head`)"),
]
NamespaceOption = Annotated[
    str, typer.Option("--namespace", help="Ray namespace of the fleet (one fleet per namespace)")
]


def parse_replica_counts(pairs: list[str]) -> dict[str, int]:
    """``["sql=4", "calc"]`` -> ``{"sql": 4, "calc": 1}``."""
    counts: dict[str, int] = {}
    for pair in pairs:
        env, _, raw = pair.rpartition("=") if "=" in pair else (pair, "", "1")
        if not env.strip() or not raw.isdigit() or int(raw) < 1:
            raise typer.BadParameter(f"expected ENV=COUNT (COUNT >= 1), got {pair!r}",
                                     param_hint="--env")  # fmt: skip
        if env.strip() in counts:
            raise typer.BadParameter(f"{env.strip()} is given twice", param_hint="--env")
        counts[env.strip()] = int(raw)
    return counts


def parse_env_args_by_env(pairs: list[str], envs: list[str]) -> dict[str, dict[str, Any]]:
    """``--env-arg ENV:KEY=VALUE`` sets an option of ENV only, ``--env-arg KEY=VALUE`` of
    every environment (VALUE parsed as JSON when it can be, as ``envhub serve`` does)."""
    options: dict[str, dict[str, Any]] = {env: {} for env in envs}
    for pair in pairs:
        target, sep, value = pair.partition("=")
        env, colon, key = target.rpartition(":")
        if not colon:
            for env_options in options.values():
                env_options.update(parse_env_args([pair]))
        elif env not in options:
            raise typer.BadParameter(f"{pair!r} names {env!r}, which no --env starts",
                                     param_hint="--env-arg")  # fmt: skip
        else:
            options[env].update(parse_env_args([f"{key}{sep}{value}"]))
    return {env: opts for env, opts in options.items() if opts}


def parse_resources(
    values: list[str], envs: list[str]
) -> tuple[dict[str, float] | None, dict[str, dict[str, float]]]:
    """``--resources JSON`` (every replica) and ``--resources ENV=JSON`` (ENV's replicas):
    the default request and the per-environment ones."""
    default: dict[str, float] | None = None
    by_env: dict[str, dict[str, float]] = {}
    for value in values:
        env, sep, raw = ("", "", value) if value.lstrip().startswith("{") else value.partition("=")
        try:
            request = json.loads(raw)
            if not isinstance(request, dict):
                raise ValueError
            parsed = {str(k): float(v) for k, v in request.items()}
        except (ValueError, TypeError):
            raise typer.BadParameter(
                f"expected a JSON object of numbers, got {raw!r}", param_hint="--resources"
            ) from None
        if not sep:
            default = parsed
        elif env not in envs:
            raise typer.BadParameter(f"{value!r} names {env!r}, which no --env starts",
                                     param_hint="--resources")  # fmt: skip
        else:
            by_env[env] = parsed
    return default, by_env


#: A replica binds its node's address (``ray.util.get_node_ip_address()`` in the actor),
#: and Ray resolves a node started on 127.0.0.1 or localhost to the machine's routable
#: address, so every replica is reachable from the network: without a token, anyone who
#: reaches a node can open sessions, run the environment's tools and read what they
#: return. Serving that open must be asked for.
_NO_TOKEN = (
    "refusing to start a fleet without a token: its replicas serve on their nodes' network "
    "addresses, where anyone who reaches them could run episodes; pass --token TOKEN (or "
    "set ENVHUB_TOKEN) so that clients must present it, or --insecure to serve the fleet "
    "open on purpose"
)


def _control() -> ModuleType:
    try:
        from envhub.fleet import control
    except ImportError as exc:
        typer.echo(f"error: {exc.name} is missing: pip install 'envhub-rl[ray]'", err=True)
        raise typer.Exit(2) from None
    return control


def _fail(exc: Exception) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


@fleet_app.command("up")
def up_cmd(
    address: AddressOption,
    env: Annotated[
        list[str],
        typer.Option("--env", help="ENV=COUNT replicas of an environment (repeatable)"),
    ],
    env_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--env-arg",
            help="environment option ENV:KEY=VALUE for ENV's replicas, or KEY=VALUE for "
            "every environment (repeatable; VALUE parsed as JSON when it can be)",
        ),
    ] = None,
    namespace: NamespaceOption = "envhub",
    resources: Annotated[
        list[str] | None,
        typer.Option(
            "--resources",
            help="Ray resources per replica as JSON, e.g. '{\"num_cpus\": 1}' (the default), "
            "or ENV='{\"sandbox_slots\": 1}' for ENV's replicas only; custom resources are "
            "those of `ray start --resources`",
        ),
    ] = None,
    max_sessions: Annotated[int, typer.Option(help="open sessions per replica before 429")] = 4096,
    session_ttl: Annotated[float, typer.Option(help="idle seconds before abort")] = 600.0,
    token: Annotated[
        str | None,
        typer.Option(envvar="ENVHUB_TOKEN", help="require this bearer token on every replica"),
    ] = None,
    max_turns: Annotated[int | None, typer.Option(help="max turns per episode")] = None,
    tool_timeout: Annotated[float | None, typer.Option(help="tool-call timeout (s)")] = None,
    episode_timeout: Annotated[float | None, typer.Option(help="episode timeout (s)")] = None,
    max_restarts: Annotated[int, typer.Option(help="restarts Ray makes of a dead replica")] = 10,
    timeout: Annotated[float, typer.Option(help="seconds to wait for every replica")] = 180.0,
    containers: Annotated[
        bool,
        typer.Option(
            "--containers",
            help="each replica runs its environment's image (`envhub image build ENV`, built "
            "on the node if missing) and supervises the container; an image whose recipe "
            "sets nested_sandbox (swe) runs with relaxed confinement: see `envhub image run "
            "--help`",
        ),
    ] = False,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="start the fleet without --token: anyone who reaches a node can run "
            "episodes on its replicas (without this flag, a fleet with no token is refused)",
        ),
    ] = False,
) -> None:
    """Start env-server replicas on the Ray cluster at ADDRESS.

    ENV=COUNT replicas of each environment, spread over the nodes, each an `envhub serve`
    of its environment; prints them once every one answers /health. Clients reach them
    with `envhub rollout --env-fleet ADDRESS`.

    Replicas serve on their node's network address, never on loopback (Ray on Linux
    gives no node a loopback address, even one started with --node-ip-address
    127.0.0.1), so a fleet needs --token (or ENVHUB_TOKEN); --insecure starts an open
    one on purpose.

    Example: envhub fleet up --address 127.0.0.1:6380 --env calc=2 --env sql=1
    --env-arg sql:sandbox=bwrap --resources sql='{"sandbox_slots": 1}' --token "$TOKEN"
    """
    if not token and not insecure:
        typer.echo(f"error: {_NO_TOKEN}", err=True)
        raise typer.Exit(2)
    counts = parse_replica_counts(env)
    options = parse_env_args_by_env(env_arg or [], list(counts))
    default, by_env = parse_resources(resources or [], list(counts))
    serve = {"max_sessions": max_sessions, "session_ttl_s": session_ttl, "token": token or None,
             "max_turns": max_turns, "tool_timeout_s": tool_timeout,
             "episode_timeout_s": episode_timeout}  # fmt: skip
    control = _control()
    try:
        records = control.fleet_up(
            address, counts, options=options, namespace=namespace, resources=default,
            env_resources=by_env, serve=serve, max_restarts=max_restarts, timeout_s=timeout,
            containers=containers, insecure=insecure,
        )  # fmt: skip
    except FleetError as exc:
        raise _fail(exc) from None
    for record in records:
        typer.echo(f"{record.env}\t{record.replica_id}\t{record.url}\tnode {record.node_id}")
    typer.echo(f"envhub: fleet {namespace!r} is up: {len(records)} replicas", err=True)
    if insecure and not token:
        typer.echo("envhub: warning: --insecure: the replicas require no token", err=True)


@fleet_app.command("status")
def status_cmd(address: AddressOption, namespace: NamespaceOption = "envhub") -> None:
    """Show the fleet's replicas.

    A table of environment, replica, node, URL, open sessions, capacity, health (its
    /health now) and restarts."""
    from rich.console import Console
    from rich.table import Table

    control = _control()
    try:
        statuses = control.fleet_status(address, namespace)
    except FleetError as exc:
        raise _fail(exc) from None
    table = Table(title=f"envhub fleet {namespace!r} at {address}")
    for column in ("env", "replica", "node", "URL", "open sessions", "capacity", "health",
                   "restarts"):  # fmt: skip
        table.add_column(column)
    for s in statuses:
        table.add_row(
            s.env, s.replica_id, s.node_id[:12], s.url,
            "-" if s.open_sessions is None else str(s.open_sessions),
            "-" if s.capacity is None else str(s.capacity), s.health, str(s.restarts),
        )  # fmt: skip
    Console(width=200).print(table)


@fleet_app.command("down")
def down_cmd(address: AddressOption, namespace: NamespaceOption = "envhub") -> None:
    """Remove the fleet: nothing of it stays.

    Stops every replica (sessions aborted, environment resources freed), reaps each
    node's leftover sandboxes, removes the registry."""
    control = _control()
    try:
        report = control.fleet_down(address, namespace)
    except FleetError as exc:
        raise _fail(exc) from None
    reaped = sum(sum(counts.values()) for counts in report.reaped.values())
    typer.echo(f"removed {len(report.replicas)} replicas ({len(report.graceful)} shut down "
               f"cleanly), the registry and {reaped} leftover sandboxes")  # fmt: skip
    for error in report.errors:
        typer.echo(f"warning: {error}", err=True)


app.add_typer(fleet_app, name="fleet")
