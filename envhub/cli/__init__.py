"""Command-line interface: ``envhub list|info|init|serve|rollout|check|export``,
``publish|search|install``, ``sandbox``, ``image``, ``llm`` and ``fleet``.

Each command family lives in its own module and registers itself on ``app`` when
imported; heavy dependencies are imported inside the command bodies.
"""

from __future__ import annotations

from envhub.cli import (
    _registry_commands,  # noqa: F401  (registers list/info/init)
    fleet,  # noqa: F401  (registers fleet up/status/down)
    hub,  # noqa: F401  (registers publish/search/install)
    image,  # noqa: F401  (registers image build/list/rm/run)
    llm,  # noqa: F401  (registers llm serve)
    mcp,  # noqa: F401  (registers mcp)
    rollout,  # noqa: F401  (registers rollout/check/export)
    sandbox,  # noqa: F401  (registers sandbox build/gc)
    serve,  # noqa: F401  (registers serve)
    view,  # noqa: F401  (registers view/report)
)
from envhub.cli._app import app

__all__ = ["app", "main"]


def main() -> None:
    app()
