"""The ``swe`` environment: fix a bug in a real repository inside a sandbox.

An episode takes a sandbox from a warm pool, checks the repository out at the task's
base commit, and gives the model ``bash``, ``str_replace_editor``, ``run_tests`` and
``submit``. The reward is SWE-bench's "resolved": the diff of non-test files is applied
to a fresh sandbox at the base commit (test files pristine, the test patch applied),
FAIL_TO_PASS and PASS_TO_PASS run, and the reward is 1 iff all of them pass.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from envhub import Budgets, Environment, Reward, Task, TaskSet, tool
from envhub.errors import SandboxError, ToolError
from envhub.sandboxes import Sandbox, SandboxSpec, resolve_backend
from envhub.sandboxes import shared_pools as pools
from envhub_swe.catalog import IMAGE_LAYOUT, SWEBENCH_LAYOUT, Layout
from envhub_swe.editor import Editor
from envhub_swe.instances import Instance, load_instances, resolve_instance
from envhub_swe.testrun import DiffError, apply_patch, non_test_diff, run_tests, setup_task

__all__ = ["SweEnv"]

WORKDIR = "/work"

#: what a fork carries: the working tree against HEAD (through a copy of the index, so the
#: episode's own staging is untouched) and the staged change
_SNAPSHOT_DIFFS = {
    "tree": 'i=$(mktemp) && cp .git/index "$i" && GIT_INDEX_FILE="$i" git add -A && '
            'GIT_INDEX_FILE="$i" git -c core.quotepath=off diff --cached --binary HEAD; '
            's=$?; rm -f "$i"; exit $s',
    "staged": "git -c core.quotepath=off diff --cached --binary HEAD",
}
#: the -rA summary is long; the model sees its tail (failures are listed there)
RUN_TESTS_TAIL_CHARS = 6000


class SweEnv(Environment):
    """SWE-Gym/SWE-smith-style repair tasks graded by the repository's own tests.

    Options: ``sandbox`` (``docker``, the default unless ``ENVHUB_SANDBOX`` says
    otherwise, or ``bwrap``/``local``: :func:`envhub.sandboxes.resolve_backend`);
    ``swebench`` a SWE-bench JSONL file instead of the shipped tasks, with
    ``image_template`` (default ``sweb.eval.x86_64.{instance_id}:latest``),
    ``repo_dir`` (where the image holds the repository: ``/testbed`` for SWE-bench
    files, else ``/opt/repo``) and ``venv`` (its Python environment:
    ``/opt/miniconda3/envs/testbed`` for SWE-bench files, else ``/opt/venv``); ``pool_size`` warm
    sandboxes per image; ``command_timeout_s`` for ``bash``; ``test_timeout_s`` for
    ``run_tests`` and grading; ``memory`` per sandbox.
    """

    name = "swe"
    version = "0.1.0"
    budgets = Budgets(
        max_turns=50, tool_timeout_s=600.0, episode_timeout_s=3600.0, max_output_chars=16_000
    )
    final_answer_ends_episode = True

    def __init__(
        self,
        sandbox: str | None = None,
        swebench: str | None = None,
        image_template: str | None = None,
        repo_dir: str | None = None,
        venv: str | None = None,
        pool_size: int = 2,
        command_timeout_s: float = 60.0,
        test_timeout_s: float = 300.0,
        memory: str = "2GiB",
    ) -> None:
        super().__init__()
        # the common rule (option, ENVHUB_SANDBOX), but docker rather than local by
        # default: the tasks run in repository images
        self.backend = resolve_backend(sandbox, default="docker")
        self.swebench = swebench
        self.image_template = image_template
        if swebench is not None:  # SWE-bench's images: /testbed and its conda env
            self.layout_override: Layout | None = Layout(
                repo_dir=repo_dir or SWEBENCH_LAYOUT.repo_dir, venv=venv or SWEBENCH_LAYOUT.venv
            )
        elif repo_dir or venv:
            self.layout_override = Layout(
                repo_dir=repo_dir or IMAGE_LAYOUT.repo_dir, venv=venv or IMAGE_LAYOUT.venv
            )
        else:
            self.layout_override = None
        self.pool_size = int(pool_size)
        self.command_timeout_s = float(command_timeout_s)
        self.test_timeout_s = float(test_timeout_s)
        self.memory = memory
        self.instance: Instance | None = None
        self.sb: Sandbox | None = None
        self.editor: Editor | None = None
        self.submitted = False

    def load_tasks(self) -> TaskSet:
        return load_instances(self.swebench)

    # -- sandboxes ----------------------------------------------------------------------

    def _spec(self, inst: Instance) -> SandboxSpec:
        return SandboxSpec(
            image=inst.image,
            memory=self.memory,
            pids=512,
            cpus=1,
            disk="1GiB",
            tmpfs="256MiB",
            workdir=WORKDIR,
            env=inst.layout.env(inst.repo, WORKDIR if self.backend != "local" else "."),
            max_lifetime_s=self.budgets.episode_timeout_s + 600,
        )

    def _resolve(self, task: Task) -> Instance:
        inst = resolve_instance(
            task, image_template=self.image_template, layout=self.layout_override
        )
        if self.backend != "docker" and self.layout_override is None:
            # no repository image: the builder's host copies (local: used in place;
            # bwrap: uploaded into each sandbox, run by the host's /usr/bin/python3)
            from envhub_swe.build import host_layout, upload_layout

            layout = host_layout(inst.repo) if self.backend == "local" else upload_layout(inst.repo)
            inst = replace(inst, layout=layout)
        return inst

    async def _fresh(self, inst: Instance) -> Sandbox:
        """A sandbox from the warm pool with the repository at the task's base commit."""
        sb = await pools.acquire(
            self._spec(inst), self.backend, group="swe", min_idle=self.pool_size
        )
        try:
            await setup_task(sb, inst.layout, inst.bug_patch, inst.base_commit)
        except BaseException:
            await pools.release(sb)
            raise
        return sb

    async def reset(self, task: Task) -> list[dict[str, Any]]:
        messages = await super().reset(task)
        self.instance = await asyncio.to_thread(self._resolve, task)
        if self.backend == "docker" and task.metadata["repo"].startswith("pypi/"):
            from envhub_swe.images import ensure_image

            await asyncio.to_thread(ensure_image, self.instance.repo)
        self.sb = await self._fresh(self.instance)
        self.editor = Editor(self.sb, WORKDIR if self.backend != "local" else ".")
        return messages

    async def close(self) -> None:
        if self.sb is not None:
            sb, self.sb = self.sb, None
            await pools.release(sb)

    @classmethod
    async def aclose_shared(cls) -> None:
        """Destroy this process's warm sandbox pools (containers, sandbox directories)."""
        await asyncio.to_thread(pools.shutdown, "swe")

    def _sandbox(self) -> Sandbox:
        if self.sb is None:
            raise SandboxError("the episode has no sandbox (reset failed or it was closed)")
        return self.sb

    # -- tools --------------------------------------------------------------------------

    @tool
    async def bash(self, command: str) -> str:
        """Run a shell command in the repository (a fresh shell each call, no network).

        Args:
            command: The command, e.g. "grep -rn 'def merge' toolz/" or "python -c 'import toolz'".
        """
        result = await self._sandbox().exec(["bash", "-c", command], timeout=self.command_timeout_s)
        output = result.stdout + (
            ("\n" if result.stdout else "") + result.stderr if result.stderr else ""
        )
        if result.timed_out:
            return (
                f"The command timed out after {self.command_timeout_s:g}s and was killed "
                f"(run long jobs with a timeout).\n<output>\n{output}</output>"
            )
        return f"<returncode>{result.exit_code}</returncode>\n<output>\n{output}</output>"

    @tool
    async def str_replace_editor(
        self,
        command: str,
        path: str,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> str:
        """View, create and edit files.

        `view` shows a file with line numbers (`cat -n`) or lists a directory;
        `create` writes a new file; `str_replace` replaces `old_str`, which must occur
        exactly once, with `new_str`; `insert` adds `new_str` after line `insert_line`;
        `undo_edit` reverts the last edit of `path`.

        Args:
            command: One of view, create, str_replace, insert, undo_edit.
            path: File or directory, absolute or relative to the repository root.
            file_text: Content of the new file (create).
            old_str: The exact text to replace, including whitespace (str_replace).
            new_str: The replacement (str_replace) or the text to insert (insert).
            insert_line: Insert after this line; 0 inserts at the top (insert).
            view_range: [start, end] lines to view, end -1 for the end of the file (view).
        """
        assert self.editor is not None, "reset() must run before tools"
        return await self.editor.run(
            command,
            path,
            file_text=file_text,
            old_str=old_str,
            new_str=new_str,
            insert_line=insert_line,
            view_range=view_range,
        )

    @tool
    async def run_tests(self, paths: list[str]) -> str:
        """Run some of the repository's test files or test ids with pytest.

        Args:
            paths: Test files, directories or node ids of the repository's own tests,
                e.g. ["tests/test_core.py", "tests/test_core.py::test_merge"].
        """
        inst = self.instance
        assert inst is not None, "reset() must run before tools"
        if not paths:
            raise ToolError("give at least one test path")
        for p in paths:
            file = p.split("::")[0]
            if file.startswith("/") or ".." in file.split("/") or not inst.repo.is_test_file(file):
                raise ToolError(
                    f"{p!r} is not one of the repository's tests ({', '.join(inst.repo.tests)})"
                )
        run = await run_tests(
            self._sandbox(), inst.repo, inst.layout, paths=paths, timeout=self.test_timeout_s
        )
        if run.timed_out:
            return f"The tests timed out after {self.test_timeout_s:g}s."
        tail = run.log[-RUN_TESTS_TAIL_CHARS:]
        return f"pytest exit code {run.exit_code}\n{tail}"

    @tool(terminal=True)
    async def submit(self) -> str:
        """Submit the current state of the repository as your fix; this ends the episode."""
        self.submitted = True
        return "Submitted; your change will now be graded."

    # -- forking ------------------------------------------------------------------------

    async def snapshot(self) -> dict[str, Any] | None:
        """The episode's change to the repository as two binary git diffs against the
        task's base commit: the working tree (untracked files included, through a
        throwaway index) and what is staged. A child gets a fresh sandbox at the base
        commit (the warm pool's, as any episode) and applies them: the cost is the
        size of the change, whatever the prefix ran (a replay would run every command
        and test run again), on every backend alike (a ``docker commit`` would copy the
        whole container layer and leave an image to collect).

        What a diff cannot carry is not: files git ignores (build output, caches) and
        anything outside the repository (``/tmp``, installed packages). ``None``, a fork
        by replay, when the history moved (a commit, a checkout) or the change is larger
        than the sandbox's output limit."""
        sb = self._sandbox()
        assert self.instance is not None
        head = await sb.exec("git rev-parse HEAD", timeout=60)
        if not head.ok or head.stdout.strip() != self.instance.base_commit:
            return None
        diffs = {}
        for name, command in _SNAPSHOT_DIFFS.items():
            result = await sb.exec(command, timeout=120)
            if not result.ok or result.stdout_truncated:
                return None
            diffs[name] = result.stdout
        return self.copied_state("submitted", shared=("instance",)) | {"diffs": diffs}

    async def restore(self, state: object) -> None:
        assert isinstance(state, dict)
        self.restore_copied(state)
        assert self.instance is not None
        self.sb = await self._fresh(self.instance)
        self.editor = Editor(self.sb, WORKDIR if self.backend != "local" else ".")
        for name, flags in (("tree", ""), ("staged", " --cached")):
            patch = state["diffs"][name]
            if not patch:
                continue
            applied = await self.sb.exec(f"git apply --binary{flags} -", timeout=120,
                                         stdin=patch.encode())
            if not applied.ok:
                raise SandboxError(f"a fork could not apply the parent's {name} diff: "
                                   f"{applied.stderr.strip()[-500:]}")

    # -- reward -------------------------------------------------------------------------

    async def reward(self) -> Reward:
        inst = self.instance
        if inst is None or self.sb is None:
            raise SandboxError("the episode has no sandbox to take the diff from")
        info: dict[str, Any] = {"instance_id": inst.instance_id}
        try:
            diff = await non_test_diff(self.sb, inst.base_commit, inst.repo)
        except DiffError as exc:
            return _zero(info, str(exc))
        info["diff_chars"] = len(diff)
        if not diff.strip():
            return _zero(info, "empty diff")
        sb = await self._fresh(inst)
        try:
            applied = await apply_patch(sb, diff)
            if not applied:
                return _zero(info, "patch does not apply")
            if inst.test_patch and not await apply_patch(sb, inst.test_patch):
                raise SandboxError(f"the test patch of {inst.instance_id} does not apply")
            run = await run_tests(sb, inst.repo, inst.layout, timeout=self.test_timeout_s)
        finally:
            await pools.release(sb)
        result = await asyncio.to_thread(inst.grade, run)  # SWE-bench's grader reads a file
        return Reward(
            value=1.0 if result.resolved else 0.0,
            components={"patch_applied": 1.0, "f2p": result.f2p, "p2p": result.p2p},
            info={
                **info,
                "resolution": result.resolution.value,
                "failed_f2p": list(result.failed_f2p[:20]),
                "failed_p2p": list(result.failed_p2p[:20]),
                "tests_timed_out": run.timed_out,
                "test_s": round(run.duration_s, 2),
            },
        )


def _zero(info: dict[str, Any], reason: str) -> Reward:
    """Nothing was graded: no change, or a change that cannot be applied."""
    return Reward(
        value=0.0,
        components={"patch_applied": 0.0, "f2p": 0.0, "p2p": 0.0},
        info={**info, "resolution": "NO", "reason": reason},
    )
