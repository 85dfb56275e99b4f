"""``envhub report``: one self-contained HTML file with a run's page and its worst and
best episodes, for sharing or keeping as a CI artifact.

It renders the app's own templates (the run section and the episode section) with
:class:`~envhub.view.render.ReportLinks`, so links stay inside the file; the CSS and the
SVG charts are inline and the page has no script, so it opens offline.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from envhub.view import pages
from envhub.view.catalog import Catalog
from envhub.view.filters import EpisodeFilter, EpisodeOrder
from envhub.view.render import ReportLinks, render
from envhub.view.token_text import Decoder, decode_ids

__all__ = ["write_report"]


def write_report(
    run_path: Path,
    output: Path,
    *,
    cache_dir: Path,
    episodes: int = 5,
    decoder: Decoder | None = None,
    success_threshold: float = 1.0,
) -> int:
    """Write the report of ``run_path`` to ``output``; returns its size in bytes.

    ``episodes``: how many of the lowest- and of the highest-reward scored episodes it
    includes in full (plus as many masked ones, when there are any); an episode that is
    among both (ties, or fewer than 2N scored) is shown once, under the worst, and the
    best are the next ones.
    """
    catalog = Catalog([run_path], cache_dir, success_threshold=success_threshold)
    try:
        index = catalog.read_all(0)
        index.require_trajectories(whole_file=True)
        context = pages.run_context(catalog, 0)
        decode = decoder or decode_ids
        scored = EpisodeFilter(masked=False)
        groups = []
        shown: set[int] = set()  # worst and best can meet: ties, or under 2N scored
        groups_to_show: list[tuple[str, EpisodeFilter, EpisodeOrder]] = [
            (f"Worst {episodes} episodes", scored, "reward"),
            (f"Best {episodes} episodes", scored, "-reward"),
            (f"Masked episodes (first {episodes})", EpisodeFilter(masked=True), "line"),
        ]
        for heading, where, order in groups_to_show:
            rows = index.page(where, order, 0, episodes + len(shown))
            items = [
                (r, pages.episode_context(catalog, 0, r.id, decode, decoder is not None)["conv"])
                for r in [r for r in rows if r.id not in shown][:episodes]
            ]
            shown.update(r.id for r, _ in items)
            if items:
                groups.append((heading, items))
        html = render(
            "report.html",
            links=ReportLinks(),
            episode_groups=groups,
            generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            decoded=decoder is not None,
            threshold=success_threshold,
            sort_link=None,
            list_query={},  # its episode rows link to anchors, not to a list's pages
            show_versions=bool(index.distinct("policy_version")),
            **context,
        )
    finally:
        catalog.close()
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(html, "utf-8")
    return len(html.encode())
