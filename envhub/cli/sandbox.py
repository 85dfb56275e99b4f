"""``envhub sandbox build NAME`` and ``envhub sandbox gc`` (the ``--sandbox`` option of
serve, rollout and check lives in :mod:`envhub.cli.options`)."""

from __future__ import annotations

import typer

from envhub.cli._app import app

__all__ = ["sandbox_app"]

sandbox_app = typer.Typer(
    name="sandbox",
    help="Sandbox images and housekeeping (backends: local, bwrap, docker).",
    no_args_is_help=True,
)


@sandbox_app.command("build")
def build_cmd(
    name: str = typer.Argument(..., help="recipe name under sandboxes/images/ (base, python)"),
    force: bool = typer.Option(False, "--force", help="rebuild even if the tag exists"),
    dockerfile: bool = typer.Option(
        False, "--dockerfile", help="docker build the recipe's Dockerfile (needs a registry)"
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="hide debootstrap/apt output"),
) -> None:
    """Build a sandbox image (idempotent: skipped when its content-hash tag exists)."""
    from envhub.errors import SandboxError
    from envhub.sandboxes import images

    try:
        tag = images.build(name, force=force, dockerfile=dockerfile, log=not quiet)
    except SandboxError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(tag)


@sandbox_app.command("gc")
def gc_cmd(
    all_: bool = typer.Option(False, "--all", help="remove every envhub container"),
    pool: str | None = typer.Option(None, "--pool", help="only containers of this pool"),
) -> None:
    """Remove sandbox containers and bwrap/local directories left by dead envhub processes."""
    from envhub.errors import SandboxError
    from envhub.sandboxes.docker import docker_available
    from envhub.sandboxes.gc import gc_bwrap_dirs, gc_containers, gc_local_dirs

    reaped = gc_bwrap_dirs()
    local_reaped = gc_local_dirs()
    dirs = f"{len(reaped)} bwrap and {len(local_reaped)} local directories"
    if not docker_available():
        typer.echo(f"removed {dirs}; docker not available, skipped")
        return
    try:
        report = gc_containers(all_=all_, pool=pool)
    except SandboxError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"removed {len(report.removed)} containers (kept {report.kept}) and {dirs}")
    for err in report.errors:
        typer.echo(f"error: {err}", err=True)
    if report.errors:
        raise typer.Exit(1)


app.add_typer(sandbox_app, name="sandbox")

if __name__ == "__main__":
    sandbox_app()
