"""``envhub image build|list|rm|run``: one Docker image per environment, serving the API."""

from __future__ import annotations

from typing import Annotated

import typer

from envhub.cli._app import app

__all__ = ["image_app"]

image_app = typer.Typer(
    name="image",
    help="Docker images that serve one environment each (envhub serve ENV inside).",
    no_args_is_help=True,
)


def _fail(exc: Exception) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(1)


@image_app.command("build")
def build_cmd(
    env: Annotated[str, typer.Argument(help="installed environment plugin (calc, sql, ...)")],
    force: Annotated[bool, typer.Option("--force", help="rebuild even if the tag exists")] = False,
) -> None:
    """Build ENV's image offline (skipped when its content tag exists); prints the tag."""
    from envhub.environment_images import build_env_image
    from envhub.errors import EnvhubError

    try:
        typer.echo(build_env_image(env, force=force))
    except EnvhubError as exc:
        raise _fail(exc) from None


@image_app.command("list")
def list_cmd(
    env: Annotated[str | None, typer.Argument(help="only this environment's images")] = None,
) -> None:
    """List environment images (and the shared envhub/runtime images)."""
    from envhub.environment_images.run import list_images
    from envhub.errors import EnvhubError

    try:
        rows = list_images(env)
    except EnvhubError as exc:
        raise _fail(exc) from None
    for r in rows:
        typer.echo(f"{r['repository']}:{r['tag']}\t{r['id']}\t{r['size']}\t{r['created']}")


@image_app.command("rm")
def rm_cmd(
    env: Annotated[str | None, typer.Argument(help="this environment's images")] = None,
    all_: Annotated[bool, typer.Option("--all", help="every environment's images")] = False,
    runtime: Annotated[
        bool, typer.Option("--runtime", help="also the shared envhub/runtime images")
    ] = False,
) -> None:
    """Remove an environment's images (or --all of them)."""
    from envhub.environment_images.run import remove_images
    from envhub.errors import EnvhubError

    if (env is None) == (not all_):
        raise _fail(ValueError("name an environment or pass --all"))
    try:
        removed = remove_images(env, runtime=runtime)
    except EnvhubError as exc:
        raise _fail(exc) from None
    typer.echo(f"removed {len(removed)} images" + "".join(f"\n  {r}" for r in removed))


@image_app.command("run")
def run_cmd(
    env: Annotated[str, typer.Argument(help="environment whose image to run")],
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0: a free one)")] = 8000,
    token: Annotated[
        str | None, typer.Option(envvar="ENVHUB_TOKEN", help="bearer token clients must send")
    ] = None,
    build: Annotated[bool, typer.Option(help="build the image first if missing")] = True,
    memory: Annotated[str, typer.Option(help="memory limit, docker's notation (no swap)")] = "4g",
    cpus: Annotated[float | None, typer.Option(help="CPU limit (default: all)")] = None,
    pids: Annotated[int, typer.Option(help="process and thread limit")] = 4096,
) -> None:
    """Start ENV's container on envhub's network, published on 127.0.0.1:PORT; prints the
    URL and container id once it is healthy (stop it with `docker rm -f ID`).

    Every container runs as uid 1000 with no capability, no-new-privileges, a read-only
    root and limits. An image whose recipe sets nested_sandbox (swe: bubblewrap sandboxes
    inside) is confined less: envhub's seccomp denylist instead of docker's allowlist
    (user namespaces and mount allowed), /proc and /sys unmasked (/proc/keys,
    /proc/timer_list, /sys/firmware... visible, /proc/sys a writable mount) and AppArmor
    off; run it on dedicated nodes or a VM-isolated runtime where that matters."""
    from envhub.environment_images import build_env_image
    from envhub.environment_images.run import start_container
    from envhub.errors import EnvhubError

    try:
        tag = build_env_image(env) if build else f"envhub/{env}:latest"
        container = start_container(
            tag, port=port, token=token, memory=memory, cpus=cpus, pids=pids
        )
    except EnvhubError as exc:
        raise _fail(exc) from None
    typer.echo(f"{container.url}\t{container.id[:12]}")


app.add_typer(image_app, name="image")
