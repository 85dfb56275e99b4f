"""The ``git-history`` task set: questions about a small repository's history, answered
through ``mcp-server-git`` (the reference MCP server on PyPI).

The repository is built once per machine into envhub's cache
(:func:`envhub.runtime.cache.build_once`) by a fixed script: fixed names, e-mails, author
and committer dates, contents and git configuration, so every build has the same commit
hashes and the shipped answers (which quote hashes) stay true. :data:`HEAD` is checked after
the build; a git that hashed differently would fail there, not in a silently wrong reward.
Each episode gets its own copy, since the server's tools can commit, reset and check out.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

from envhub.errors import EnvironmentFailure
from envhub.runtime.cache import build_once_async, cache_root

__all__ = ["HEAD", "build_repository", "prepare_workdir", "repository"]

#: the commit hash of ``main`` in every correct build
HEAD = "edddd3854bc5b320501ca04796a4d62e3d6e7403"

_AUTHORS = {
    "ada": ("Ada Park", "ada@orbit.example"),
    "bea": ("Bea Ortiz", "bea@orbit.example"),
    "chen": ("Chen Wu", "chen@orbit.example"),
    "dara": ("Dara Singh", "dara@orbit.example"),
}


class _Commit(NamedTuple):
    author: str  # a key of _AUTHORS
    date: str  # ISO 8601, used as both author and committer date
    message: str
    files: dict[str, str]  # path -> content written before the commit


class _Git(NamedTuple):
    """A ref step between commits: the git arguments, e.g. ``("tag", "v0.1")``."""

    args: tuple[str, ...]


_HISTORY: list[_Commit | _Git] = [
    _Commit("ada", "2024-03-01T09:00:00+00:00", "Initial commit",
        {"README.md": "# orbit\n\nTiny orbital mechanics helpers.\n"}),
    _Commit("bea", "2024-03-02T10:30:00+00:00", "Add vector module",
        {"orbit/__init__.py": "", "orbit/vector.py":
         "import math\n\n\ndef norm(v):\n    return math.sqrt(sum(x * x for x in v))\n"}),
    _Commit("ada", "2024-03-04T14:15:00+00:00", "Add orbital period helper",
        {"orbit/period.py": "import math\n\nMU_EARTH = 398600.4418\n\n\n"
         "def period(a_km):\n    return 2 * math.pi * math.sqrt(a_km**3 / MU_EARTH)\n"}),
    _Commit("chen", "2024-03-05T08:45:00+00:00", "Fix unit conversion in period",
        {"orbit/period.py": "import math\n\nMU_EARTH = 398600.4418  # km^3/s^2\n\n\n"
         "def period(a_km):\n    \"\"\"Seconds.\"\"\"\n"
         "    return 2 * math.pi * math.sqrt(a_km**3 / MU_EARTH)\n"}),
    _Commit("bea", "2024-03-07T16:00:00+00:00", "Document the public API",
        {"README.md": "# orbit\n\nTiny orbital mechanics helpers.\n\n"
         "- `orbit.vector.norm(v)`\n- `orbit.period.period(a_km)`\n"}),
    _Git(("tag", "v0.1")),
    _Git(("checkout", "-q", "-b", "feature/drag")),
    _Commit("chen", "2024-03-08T11:20:00+00:00", "Sketch atmospheric drag model",
        {"orbit/drag.py":
         "def drag(rho, v, cd, area):\n    return 0.5 * rho * v * v * cd * area\n"}),
    _Git(("checkout", "-q", "main")),
    _Commit("ada", "2024-03-09T09:10:00+00:00", "Bump version to 0.2.0", {"VERSION": "0.2.0\n"}),
    _Commit("dara", "2024-03-11T13:05:00+00:00", "Add tests for vector norms",
        {"tests/test_vector.py": "from orbit.vector import norm\n\n\n"
         "def test_norm():\n    assert norm([3, 4]) == 5\n"}),
]
# left uncommitted: one staged new file and one unstaged edit (for git_status/diff tasks)
_STAGED = {"CHANGELOG.md": "## 0.2.0\n\n- orbital period helper\n"}
_UNSTAGED = {"README.md": "# orbit\n\nTiny orbital mechanics helpers.\n\n"
             "- `orbit.vector.norm(v)`\n- `orbit.period.period(a_km)`\n\n"
             "TODO: document the drag model\n"}


def _git(repo: Path, *args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise EnvironmentFailure(f"building the git-history repository: git {args[0]} "
                                 f"failed: {done.stderr.strip()[:500]}")
    return done.stdout.strip()


def _write(repo: Path, files: dict[str, str]) -> list[str]:
    for path, content in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, "utf-8")
    return sorted(files)


def build_repository(repo: Path) -> None:
    """Create the repository at ``repo`` (which must not exist) from the fixed script."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo.parent),  # no user configuration takes part
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
        "TZ": "UTC",
    }
    repo.mkdir()
    _git(repo, "init", "-q", "--initial-branch=main", env=env)
    _git(repo, "config", "commit.gpgsign", "false", env=env)
    _git(repo, "config", "core.hooksPath", os.devnull, env=env)
    for step in _HISTORY:
        if isinstance(step, _Git):
            _git(repo, *step.args, env=env)
            continue
        name, email = _AUTHORS[step.author]
        _git(repo, "add", "--", *_write(repo, step.files), env=env)
        identity = {
            "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": step.date,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email,
            "GIT_COMMITTER_DATE": step.date,
        }
        _git(repo, "commit", "-q", "-m", step.message, env={**env, **identity})
    head = _git(repo, "rev-parse", "main", env=env)
    if head != HEAD:
        raise EnvironmentFailure(
            f"the git-history repository built with head {head}, expected {HEAD}: this git "
            "hashes differently, so the task set's answers would be wrong"
        )
    _git(repo, "add", "--", *_write(repo, _STAGED), env=env)
    _write(repo, _UNSTAGED)


async def repository() -> Path:
    """The built repository in the cache (built on first use, by one process at a time)."""
    return await build_once_async(
        cache_root("mcp") / "git-history-repo", build_repository, stamp=f"head={HEAD}"
    )


async def prepare_workdir(workdir: Path) -> None:
    """Fill an episode's (empty) ``workdir`` with its own copy of the repository."""
    source = await repository()
    await asyncio.to_thread(shutil.copytree, source, workdir, symlinks=True, dirs_exist_ok=True)
