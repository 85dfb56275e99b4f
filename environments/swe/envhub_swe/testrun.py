"""What happens to a repository inside a sandbox: check out, run tests, diff, apply.

Shared by episodes, grading and task generation, so a task is validated with exactly
the commands that later grade it.

Who is to blame decides the reward: setting a task up in a fresh sandbox must work, so
a failure there is infrastructure (``SandboxError``, the episode is masked); what goes
wrong in the agent's repository (a broken ``.git``, a deleted test log) is the agent's
outcome and scores like failing tests.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from envhub.errors import FileOperationError, SandboxError
from envhub.sandboxes import ExecResult, Sandbox
from envhub_swe.build import GIT_IDENTITY
from envhub_swe.catalog import DEPS_DIR, Layout, RepoSpec

__all__ = [
    "DiffError",
    "TestRun",
    "apply_patch",
    "checkout",
    "non_test_diff",
    "pytest_command",
    "run_tests",
]

#: inside .git, so neither the agent's diff nor ``git status`` sees it
LOG_FILE = ".git/envhub-tests.log"
PATCH_FILE = ".git/envhub.patch"
#: the test log is read whole (a -rA summary of ~1,000 tests is ~100 KB)
MAX_LOG_BYTES = 8 * 1024 * 1024


async def _must(sb: Sandbox, cmd: str, timeout: float = 120.0) -> ExecResult:
    result = await sb.exec(cmd, timeout=timeout)
    if not result.ok:
        raise SandboxError(
            f"sandbox command failed ({result.exit_code}): {cmd[:200]}: "
            f"{(result.stderr or result.stdout)[-1000:]}"
        )
    return result


async def checkout(sb: Sandbox, layout: Layout) -> None:
    """Copy the pristine repository (at its base commit) into the sandbox's workdir."""
    try:
        if layout.uploaded:
            await sb.upload_dir(layout.repo_dir, ".")
        else:
            await _must(sb, f"cp -a {shlex.quote(layout.repo_dir)}/. .")
        if layout.deps:
            await sb.upload_dir(layout.deps, DEPS_DIR)
    except FileOperationError as exc:  # a fresh sandbox that cannot take the repository
        raise SandboxError(f"checkout failed: {exc}") from exc


BUG_COMMIT_MESSAGE = "envhub: task base commit"


async def commit_all(sb: Sandbox, message: str = BUG_COMMIT_MESSAGE) -> str:
    """Commit the workdir's state (reproducibly) and return the new commit hash."""
    result = await sb.exec(
        "git add -A && git -c commit.gpgsign=false commit -q --allow-empty"
        f" -m {shlex.quote(message)} && git rev-parse HEAD",
        timeout=60,
        env=GIT_IDENTITY,
    )
    if not result.ok:
        raise SandboxError(f"git commit failed: {(result.stderr or result.stdout)[-1000:]}")
    return result.stdout.strip().splitlines()[-1]


async def setup_task(sb: Sandbox, layout: Layout, bug_patch: str, base_commit: str) -> None:
    """Check out the repository and commit the task's bug on top: HEAD is then the task's
    ``base_commit`` (checked, so a drifted image or record fails loudly).

    One ``exec`` for the whole of it where the repository is in the sandbox already (the
    patch comes on stdin): this is the episode's reset latency.
    """
    steps = []
    if layout.uploaded or layout.deps:
        await checkout(sb, layout)
    else:
        steps.append(f"cp -a {shlex.quote(layout.repo_dir)}/. .")
    if bug_patch:
        steps += [
            "git apply -",
            "git add -A",
            f"git -c commit.gpgsign=false commit -q -m {shlex.quote(BUG_COMMIT_MESSAGE)}",
        ]
    steps.append("git rev-parse HEAD")
    result = await sb.exec(
        " && ".join(steps), timeout=120, stdin=bug_patch.encode(), env=GIT_IDENTITY
    )
    if not result.ok:
        raise SandboxError(f"task setup failed: {(result.stderr or result.stdout)[-1000:]}")
    head = result.stdout.strip().splitlines()[-1]
    if head != base_commit:
        raise SandboxError(
            f"the repository is at {head[:12]}, the task expects base commit {base_commit[:12]}"
        )


def pytest_command(repo: RepoSpec, layout: Layout, paths: list[str] | None = None) -> str:
    """The repository's test command, with a -rA summary and no cache writes."""
    args = [
        layout.python, "-m", "pytest", "-rA", "--tb=short", "-p", "no:cacheprovider",
        "-o", "addopts=", "--color=no", *(paths or repo.tests),
    ]  # fmt: skip
    for excluded in repo.exclude:
        args += ["--deselect", excluded]
    return " ".join(shlex.quote(a) for a in args)


class DiffError(Exception):
    """The workdir's change could not be taken; the episode scores 0 (not an infra
    failure: only the agent can break its own repository)."""


@dataclass
class TestRun:
    """One run of the test command: its ``-rA`` log is what grading reads
    (:meth:`envhub_swe.instances.Instance.grade`, :mod:`envhub.rewards.swe`)."""

    __test__ = False  # not a pytest test class

    log: str
    exit_code: int
    timed_out: bool
    duration_s: float

    @property
    def collected(self) -> bool:
        """pytest exit codes 0 (all passed) and 1 (some failed) mean the suite ran;
        2-5 are interruptions, usage or collection errors, or no tests at all."""
        return self.exit_code in (0, 1) and not self.timed_out


async def run_tests(
    sb: Sandbox,
    repo: RepoSpec,
    layout: Layout,
    *,
    paths: list[str] | None = None,
    timeout: float = 300.0,
) -> TestRun:
    """Run the tests in the workdir; the log goes to a file so no output cap cuts it.

    A log the tests' code removed or bloated reads as a run with no results.
    """
    cmd = f"{pytest_command(repo, layout, paths)} > {LOG_FILE} 2>&1"
    result = await sb.exec(cmd, timeout=timeout)
    try:
        log = (await sb.read_file(LOG_FILE, max_bytes=MAX_LOG_BYTES)).decode("utf-8", "replace")
    except FileOperationError as exc:
        log = f"envhub: the test log could not be read ({exc})\n"
    return TestRun(
        log=log,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        duration_s=result.duration_s,
    )


def _exclude_tests(repo: RepoSpec | None) -> list[str]:
    specs = [
        ":(exclude,glob)**/tests/**",
        ":(exclude,glob)**/test/**",
        ":(exclude,glob)**/test_*.py",
        ":(exclude,glob)**/*_test.py",
        ":(exclude,glob)**/conftest.py",
    ]
    if repo is not None:
        specs += [f":(exclude,glob){t.rstrip('/')}/**" for t in repo.tests]
        # every file the tests (or a test patch) bring, data files included: the test
        # patch must apply on top of the agent's diff whatever the agent created
        specs += [f":(exclude){t.rstrip('/')}" for t in repo.tests]
    return specs


async def non_test_diff(sb: Sandbox, base_commit: str, repo: RepoSpec | None = None) -> str:
    """The agent's change against the base commit, test files left out (they are reset
    before grading, so editing them can never help)."""
    pathspec = " ".join(shlex.quote(s) for s in [".", *_exclude_tests(repo)])
    result = await sb.exec(
        f"git add -A && git -c core.quotepath=off diff --cached --binary {base_commit}"
        f" -- {pathspec}",
        timeout=120,
    )
    if not result.ok:  # the agent broke the repository (e.g. removed .git): its loss
        raise DiffError(f"git could not diff the workdir: {result.stderr.strip()[-500:]}")
    if result.stdout_truncated:
        raise DiffError("the diff is larger than the sandbox output limit")
    return result.stdout


async def apply_patch(sb: Sandbox, patch: str) -> bool:
    """Apply ``patch`` to a fresh workdir with SWE-bench's fallbacks; False if none
    applies."""
    try:
        await sb.write_file(PATCH_FILE, patch.encode())
    except FileOperationError as exc:  # the grading sandbox is fresh: not the agent's doing
        raise SandboxError(f"writing the patch failed: {exc}") from exc
    for cmd in (
        f"git apply --verbose {PATCH_FILE}",
        f"git apply --verbose --reject {PATCH_FILE}",
        f"patch --batch --fuzz=5 -p1 -i {PATCH_FILE}",
    ):
        result = await sb.exec(cmd, timeout=60)
        if result.ok:
            return True
        await sb.exec("git checkout -q -- . && git clean -fdq", timeout=60)
    return False
