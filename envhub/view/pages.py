"""The context of each page, built from the catalog: what the web app renders per request
and the report renders once (one builder per page, so the two cannot drift)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from envhub.errors import InvalidRequest
from envhub.view.catalog import Catalog
from envhub.view.conversation import Conversation, conversation
from envhub.view.filters import EpisodeFilter, EpisodeOrder
from envhub.view.index import EpisodeRow, RunIndex, TreeNode
from envhub.view.stats import RunStats, TaskStats
from envhub.view.token_text import Decoder

__all__ = [
    "PAGE_SIZE",
    "TASK_ROWS",
    "CompareRow",
    "compare_context",
    "compare_task_context",
    "episode_context",
    "episodes_context",
    "run_context",
    "runs_context",
    "tree_context",
]

PAGE_SIZE = 50
TASK_ROWS = 200  # the by-task table shows this many rows of the chosen order
TaskSort = Literal[
    "task", "-task", "episodes", "-episodes", "reward", "-reward", "success", "-success"
]

SORTS: list[tuple[EpisodeOrder, str]] = [
    ("line", "file order"), ("reward", "reward ↑"), ("-reward", "reward ↓"),
    ("turns", "turns ↑"), ("-turns", "turns ↓"), ("task", "task id"), ("-time", "slowest"),
]  # fmt: skip


def runs_context(catalog: Catalog) -> dict[str, Any]:
    rows = []
    for entry in catalog.runs:
        catalog.entry(entry.number)  # retries a file that was missing
        row: dict[str, Any] = {"number": entry.number, "path": entry.path, "error": entry.error}
        if entry.index is not None:
            catalog.index(entry.number)  # reads what was appended
            row["stats"] = catalog.stats(entry.number, detail=False)
            row["state"] = entry.index.state()
        rows.append(row)
    # only runs of one environment compare: tasks of two environments are not the same
    # tasks, even where their ids coincide
    shown = [row for row in rows if "stats" in row and row["stats"].env is not None]
    pairs = [
        (a, b)
        for i, a in enumerate(shown)
        for b in shown[i + 1 :]
        if a["stats"].env == b["stats"].env
    ]
    return {
        "title": "runs",
        "rows": rows,
        "compare_pairs": pairs,
        "environments": len({row["stats"].env for row in shown}),
    }


def _sorted_tasks(tasks: list[TaskStats], sort: TaskSort) -> list[TaskStats]:
    key: Callable[[TaskStats], Any] = {
        "task": lambda t: t.task_id,
        "episodes": lambda t: (t.episodes, t.task_id),
        "reward": lambda t: (t.mean_reward if t.mean_reward is not None else -1e300, t.task_id),
        "success": lambda t: (t.success, t.task_id),
    }[sort.lstrip("-")]
    return sorted(tasks, key=key, reverse=sort.startswith("-"))[:TASK_ROWS]


def run_context(catalog: Catalog, run: int, task_sort: TaskSort = "success") -> dict[str, Any]:
    index = catalog.index(run)
    stats: RunStats = catalog.stats(run)
    return {
        "title": index.path.name,
        "run": run,
        "path": index.path,
        "stats": stats,
        "state": index.state(),
        "problems": index.problems(),
        "task_rows": _sorted_tasks(stats.tasks, task_sort),
        "task_sort": task_sort,
    }


def episodes_context(
    catalog: Catalog, run: int, where: EpisodeFilter, sort: EpisodeOrder, page: int
) -> dict[str, Any]:
    index = catalog.index(run)
    total = index.count(where)
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(max(page, 1), pages)
    return {
        "title": f"episodes of {index.path.name}",
        "run": run,
        "path": index.path,
        "state": index.state(),
        "problems": index.problems(),
        "f": where,
        "sort": sort,
        "sorts": SORTS,
        "total": total,
        "page": page,
        "pages": pages,
        "episodes": index.page(where, sort, (page - 1) * PAGE_SIZE, PAGE_SIZE),
        "list_query": _list_query(where, sort),
        **_facets(index),
    }


def _list_query(where: EpisodeFilter, sort: EpisodeOrder) -> dict[str, str]:
    """The query naming an episode list: an episode page reached from it walks it."""
    return {**where.query(), **({} if sort == "line" else {"sort": sort})}


def _facets(index: RunIndex) -> dict[str, Any]:
    """The values the filter menus offer (kept in the index until it changes)."""

    def compute() -> str:
        return json.dumps(
            {
                "show_versions": bool(index.distinct("policy_version")),
                "facets": {
                    "stop_reason": sorted({r or "none" for r in index.distinct("stop_reason")}),
                    "error_kind": index.distinct("error_kinds"),
                    "tool": index.distinct("tools_used"),
                },
            }
        )

    facets: dict[str, Any] = json.loads(index.memo("facets", compute))
    return facets


def _episode(
    catalog: Catalog, run: int, episode_id: int, decoder: Decoder
) -> tuple[EpisodeRow, Conversation]:
    index = catalog.index(run)
    row = index.episode(episode_id)
    if row is None:
        raise InvalidRequest(f"no episode {episode_id} in {index.path}", code="unknown_episode")
    return row, conversation(index.record(episode_id), decoder)


def episode_context(
    catalog: Catalog,
    run: int,
    episode_id: int,
    decoder: Decoder,
    decoded: bool,
    where: EpisodeFilter | None = None,
    sort: EpisodeOrder = "line",
) -> dict[str, Any]:
    """The episode, and its place in the list it was reached from (``where`` and
    ``sort``, the episodes page's): previous and next walk that list, or the whole run
    in file order when the episode is not in it."""
    row, conv = _episode(catalog, run, episode_id, decoder)
    where = where or EpisodeFilter()
    index = catalog.index(run, refresh=False)
    place = index.place(episode_id, where, sort)
    if place is None:
        where, sort = EpisodeFilter(), "line"
        place = index.place(episode_id)
    list_query = _list_query(where, sort)
    return {
        "place": place,
        "list_query": list_query,
        "list_page": 1 if place is None else (place.position - 1) // PAGE_SIZE + 1,
        "title": f"{row.task_id} #{row.sample_index}",
        "run": run,
        "path": catalog.runs[run].path,
        "row": row,
        "conv": conv,
        "decoded": decoded,
        "threshold": catalog.success_threshold,
        "tree": _tree_links(index, episode_id),
    }


def _tree_links(index: RunIndex, episode_id: int) -> dict[str, Any] | None:
    """Where an episode of a tree sits: its tree, the episode it was forked from and
    the ones forked from it (by branch turn); ``None`` outside a tree."""
    place = index.tree_of(episode_id)
    if place is None:
        return None
    tree_id, trajectory_id, parent_id, branch_turn = place
    nodes = index.tree(tree_id)
    parent = next((n for n in nodes if parent_id and n.trajectory_id == parent_id), None)
    children = [n for n in nodes if trajectory_id and n.parent_id == trajectory_id]
    children.sort(key=lambda n: (n.branch_turn or 0, n.sample_index))
    return {"tree_id": tree_id, "parent": parent, "parent_id": parent_id,
            "branch_turn": branch_turn, "children": children, "size": len(nodes)}  # fmt: skip


def tree_context(catalog: Catalog, run: int, tree_id: str) -> dict[str, Any]:
    """A tree of a tree rollout: its episodes nested under the ones they were forked
    from, each with the turn it branched at."""
    index = catalog.index(run)
    nodes = index.tree(tree_id)
    if not nodes:
        raise InvalidRequest(f"no tree {tree_id!r} in {index.path}", code="unknown_episode")
    known = {n.trajectory_id for n in nodes}
    children: dict[str | None, list[TreeNode]] = {}
    for node in nodes:  # an episode whose parent is not indexed hangs from the top
        parent = node.parent_id if node.parent_id in known else None
        children.setdefault(parent, []).append(node)
    for kids in children.values():
        kids.sort(key=lambda n: (n.branch_turn or 0, n.sample_index))
    scored = [n.reward for n in nodes if not n.masked and n.reward is not None]
    return {
        "title": f"tree {tree_id[:12]}",
        "run": run,
        "path": catalog.runs[run].path,
        "tree_id": tree_id,
        "roots": children.get(None, []),
        "children": children,
        "leaves": len(nodes),
        "branch_points": len({(n.parent_id, n.branch_turn) for n in nodes if n.parent_id}),
        "mean_reward": sum(scored) / len(scored) if scored else None,
        "threshold": catalog.success_threshold,
    }


@dataclass(frozen=True)
class CompareRow:
    task_id: str
    a: float | None
    b: float | None

    @property
    def outcome(self) -> str:
        if self.a is None or self.b is None or abs(self.a - self.b) < 1e-12:
            return "tie"
        return "win" if self.a > self.b else "loss"


def compare_context(catalog: Catalog, a: int, b: int) -> dict[str, Any]:
    """Per task, the mean reward of A and of B over their scored samples; ``env_a`` and
    ``env_b``, so that the page compares nothing when they differ and says why (the runs
    page offers no such pair, but a URL can name one)."""
    catalog.index(a), catalog.index(b)  # read what was appended
    stats_a, stats_b = catalog.stats(a), catalog.stats(b)
    tasks_a = {t.task_id: t for t in stats_a.tasks}
    tasks_b = {t.task_id: t for t in stats_b.tasks}
    common = sorted(tasks_a.keys() & tasks_b.keys())
    rows = [CompareRow(t, tasks_a[t].mean_reward, tasks_b[t].mean_reward) for t in common]
    outcomes = [r.outcome for r in rows]
    scored = [r for r in rows if r.a is not None and r.b is not None]
    return {
        "title": "compare",
        "a": a,
        "b": b,
        "path_a": catalog.runs[a].path,
        "path_b": catalog.runs[b].path,
        "env_a": stats_a.env,
        "env_b": stats_b.env,
        "rows": sorted(rows, key=lambda r: (r.outcome != "loss", r.outcome != "win", r.task_id)),
        "wins": outcomes.count("win"),
        "losses": outcomes.count("loss"),
        "ties": outcomes.count("tie"),
        "mean_a": sum(r.a or 0 for r in scored) / len(scored) if scored else None,
        "mean_b": sum(r.b or 0 for r in scored) / len(scored) if scored else None,
        "only_a": len(tasks_a.keys() - tasks_b.keys()),
        "only_b": len(tasks_b.keys() - tasks_a.keys()),
    }


def compare_task_context(
    catalog: Catalog, a: int, b: int, task_id: str, decoder: Decoder, decoded: bool
) -> dict[str, Any]:
    sides = []
    for label, run in (("A", a), ("B", b)):
        index = catalog.index(run)
        items = [_episode(catalog, run, row.id, decoder) for row in index.find(task_id)[:4]]
        sides.append((label, run, index.path, items))
    return {
        "title": f"{task_id}: A vs B",
        "a": a,
        "b": b,
        "task_id": task_id,
        "sides": sides,
        "decoded": decoded,
        "threshold": catalog.success_threshold,
    }
