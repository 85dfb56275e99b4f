"""The ``harbor`` environment: Harbor and Terminal-Bench tasks, run and graded in Docker.

An episode is one Harbor trial: the task's image (:mod:`envhub_harbor.images`) is
started as a container (:mod:`envhub_harbor.container`), the model gets the task's
``instruction.md`` and a ``terminal`` tool running its commands there, and ``finish``
ends the episode. Grading is Harbor's ``Verifier.verify``: ``tests/`` is copied to
``/tests``, ``test.sh`` runs with its output in ``/logs/verifier/test-stdout.txt``, and
the verdict is ``/logs/verifier/reward.json`` (a map of named rewards) or, failing
that, ``reward.txt`` (one number). Where Harbor's error policy has no valid reward
(``VerifierTimeoutError``, ``RewardFileNotFoundError``, ``RewardFileEmptyError``,
``VerifierOutputParseError``), the episode is masked with that name; it is never
scored 0. The reference policy replays ``solution/solve.sh`` as Harbor's
``OracleAgent`` runs it.

Cost: an episode takes its container, already started and prepared, from a warm pool per
task image (:mod:`envhub.sandboxes.shared_pools`, ``pool_size`` idle ones) at its first
command, and removes it in the background when it closes. An episode whose agent ran no
command left the task image as built, so it gets the verdict on the untouched image:
graded in a container once per process and task, then reused (it depends on no episode).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import math
import shlex
import time
from importlib import resources
from pathlib import Path
from typing import Any

from envhub import Budgets, Environment, GoldCall, Reward, Task, TaskSet, tool
from envhub.errors import EnvironmentFailure, InvalidRequest, SandboxError
from envhub.sandboxes import SandboxSpec, shared_pools
from envhub.sandboxes.docker_cli import run_docker
from envhub_harbor.container import AGENT_USER, ROOT, HarborContainer
from envhub_harbor.images import ensure_image, parse_base_images
from envhub_harbor.taskdir import HarborTask, find_task_dirs, load_task, resolve_env

__all__ = ["HarborEnv", "VerifierError"]

VERIFIER_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
#: the verifier's output the model never sees but the trajectory keeps (its tail)
_LOG_TAIL_CHARS = 4000
_images: dict[tuple[str, str], str] = {}
#: the sandbox backend of the pools: envhub's docker sandbox with the task image's files
_BACKEND = "envhub_harbor.container:HarborContainer"
#: the verdict on each untouched task image (cache key: :func:`_untouched_key`)
_untouched: dict[str, Reward] = {}


class VerifierError(EnvironmentFailure):
    """The task's tests gave no valid reward (Harbor's error policy:
    ``has_valid_reward=False``): masked, named after Harbor's exception."""

    code = "harbor_verifier_error"


def _shipped_tasks() -> str:
    return str(resources.files("envhub_harbor") / "tasks")


class HarborEnv(Environment):
    """Harbor (``task.toml``) and Terminal-Bench (``task.yaml``) task directories.

    Options: ``tasks`` a task directory or a directory of them (default: the two shipped
    tasks); ``base_images`` ``REF=LOCAL,...`` mapping ``FROM`` images that are not
    present locally to local ones (over :data:`~envhub_harbor.images.DEFAULT_BASE_IMAGES`;
    a LOCAL may be a sandbox recipe name such as ``python``); ``network`` ``task`` (the
    task's ``network_mode``; none unless it says ``public``) or ``none``;
    ``command_timeout_s`` per terminal command; ``memory`` and ``cpus`` per container
    unless the task sets ``memory_mb``/``cpus``; ``pids``; ``pool_size`` started
    containers kept idle per task image (module docstring).
    """

    name = "harbor"
    version = "0.1.0"
    budgets = Budgets(
        max_turns=50, tool_timeout_s=900.0, episode_timeout_s=7200.0, max_output_chars=16_000
    )
    final_answer_ends_episode = True

    def __init__(
        self,
        tasks: str | None = None,
        base_images: str | None = None,
        network: str = "task",
        command_timeout_s: float = 120.0,
        memory: str = "2GiB",
        cpus: float = 1.0,
        pids: int = 1024,
        pool_size: int = 1,
    ) -> None:
        super().__init__()
        if network not in ("task", "none"):
            raise InvalidRequest(f"network is 'task' or 'none', not {network!r}")
        self.tasks_path = tasks or _shipped_tasks()
        self.base_images = parse_base_images(base_images)
        self.network = network
        self.command_timeout_s = float(command_timeout_s)
        self.memory = memory
        self.cpus = float(cpus)
        self.pids = int(pids)
        self.pool_size = int(pool_size)
        self.spec: HarborTask | None = None
        self.sandbox_spec: SandboxSpec | None = None
        self.sb: HarborContainer | None = None
        self.deadline: float | None = None

    # -- tasks ----------------------------------------------------------------------------

    def load_tasks(self) -> TaskSet:
        """Every task of ``tasks``, its image built now: a task that cannot be built is a
        :class:`~envhub_harbor.images.TaskBuildError` before any episode runs."""
        out = []
        for root in find_task_dirs(self.tasks_path):
            spec = load_task(root)
            image = self._image(spec)
            gold = []
            if spec.solution_b64 is not None:
                gold = [GoldCall(name="terminal", arguments={"command": _solve_command(spec)}),
                        GoldCall(name="finish")]  # fmt: skip
            out.append(Task(
                id=spec.name,
                prompt=[{"role": "user", "content": spec.instruction}],
                gold_actions=gold,
                split="test",
                metadata={**spec.metadata, "task_dir": str(root.resolve()),
                          "format": spec.format, "image": image},
            ))  # fmt: skip
        return TaskSet(out)

    def _image(self, spec: HarborTask) -> str:
        key = (str(spec.root.resolve()), json.dumps(self.base_images, sort_keys=True))
        if key not in _images:
            _images[key] = ensure_image(spec, self.base_images)
        return _images[key]

    # -- episode --------------------------------------------------------------------------

    async def reset(self, task: Task) -> list[dict[str, Any]]:
        messages = await super().reset(task)
        spec = await asyncio.to_thread(load_task, Path(task.metadata["task_dir"]))
        image = await asyncio.to_thread(self._image, spec)
        self.spec = spec
        workdir = spec.workdir or await asyncio.to_thread(_image_workdir, image)
        self.sandbox_spec = SandboxSpec.model_validate({
            "image": image,
            "memory": f"{spec.memory_mb}MiB" if spec.memory_mb else self.memory,
            "cpus": spec.cpus or self.cpus,
            "pids": self.pids,
            "network": spec.network and self.network == "task",
            "workdir": workdir,
            "max_lifetime_s": self.budgets.episode_timeout_s + 2 * spec.verifier_timeout_s + 600,
        })  # fmt: skip
        if spec.agent_timeout_s is not None:
            self.deadline = time.monotonic() + spec.agent_timeout_s
        return messages

    async def close(self) -> None:
        if self.sb is not None:
            sb, self.sb = self.sb, None
            await shared_pools.release(sb, wait=False)

    @classmethod
    async def aclose_shared(cls) -> None:
        """Destroy this process's warm containers (and wait for background removals)."""
        await asyncio.to_thread(shared_pools.shutdown, "harbor")

    async def _container(self) -> HarborContainer:
        """The episode's container, taken from the warm pool at its first use."""
        if self.sb is None:
            spec, sandbox_spec = self.spec, self.sandbox_spec
            if spec is None or sandbox_spec is None:
                raise SandboxError("the episode has no container (reset failed or it was closed)")
            sb = await shared_pools.acquire(
                sandbox_spec, _BACKEND, group="harbor", min_idle=self.pool_size,
                agent_user=spec.agent_user or AGENT_USER,
            )  # fmt: skip
            assert isinstance(sb, HarborContainer)
            self.sb = sb
        return self.sb

    # -- tools ----------------------------------------------------------------------------

    @tool
    async def terminal(self, command: str) -> str:
        """Run a shell command in the task's container (bash, a fresh shell each call,
        starting in the task's working directory).

        Args:
            command: The command line, e.g. "ls -la" or "python3 solve.py > out.txt".
        """
        sb = await self._container()
        timeout = self.command_timeout_s
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.end_episode("agent_timeout")
                return "The task's agent time (timeout_sec) is over; the episode ends."
            timeout = min(timeout, left)
        result = await sb.exec(["bash", "-c", command], timeout=timeout)
        output = result.stdout + result.stderr
        if result.timed_out:
            return f"[timed out after {timeout:g} s and killed]\n{output}"
        return f"[exit code {result.exit_code}]\n{output}"

    @tool(terminal=True)  # type: ignore[untyped-decorator]  # tool(...) is typed Any
    async def finish(self) -> str:
        """Say the task is done; this ends the episode and the task's tests run."""
        return "Finished; the task's tests will now run."

    # -- reward ---------------------------------------------------------------------------

    async def reward(self) -> Reward:  # type: ignore[override]  # may be async: it is awaited
        """Harbor's verdict (module docstring), on the container as the agent left it."""
        spec = self.spec
        if spec is None:
            raise SandboxError("the episode has no task (reset failed)")
        if self.sb is not None:
            return await self._grade(self.sb, spec)
        key = _untouched_key(spec, self.sandbox_spec)
        if key not in _untouched:
            _untouched[key] = await self._grade(await self._container(), spec)
        verdict = _untouched[key]
        return verdict.model_copy(deep=True, update={"info": {**verdict.info, "untouched": True}})

    async def _grade(self, sb: HarborContainer, spec: HarborTask) -> Reward:
        await sb.kill_agent()
        verifier = spec.verifier_user or ROOT
        env = {"HOME": "/root", **resolve_env(spec.verifier_env, spec.name)}
        with sb.acting_as(ROOT):
            fresh = await sb.exec(
                ["sh", "-c", 'rm -rf /logs "$1" && mkdir -p /logs/agent "$2" "$1" '
                 '&& chown "$3" "$2"', "sh", TESTS_DIR, VERIFIER_DIR, verifier],
                timeout=120,
            )  # fmt: skip
            if not fresh.ok:
                raise SandboxError(f"preparing /tests and /logs: {fresh.stderr.strip()[-500:]}")
        await sb.put_root_dir(spec.tests_dir, TESTS_DIR, executable=spec.test_script)
        script = f"{TESTS_DIR}/{spec.test_script}"
        started = time.monotonic()
        with sb.acting_as(verifier):
            run = await sb.exec(
                ["sh", "-c", f'("$1") > {VERIFIER_DIR}/test-stdout.txt 2>&1', "sh", script],
                timeout=spec.verifier_timeout_s,
                env=env,
            )
        files = await sb.read_verifier_dir(VERIFIER_DIR)
        log = files.get("test-stdout.txt", b"").decode("utf-8", "replace")[-_LOG_TAIL_CHARS:]
        if run.timed_out:
            raise VerifierError(
                f"VerifierTimeoutError: test.sh ran past timeout_sec "
                f"({spec.verifier_timeout_s:g} s); its output ends: {log[-500:]}"
            )
        rewards = _parse_rewards(files, log)
        value = rewards.get("reward")
        if value is None:
            value = sum(rewards.values()) / len(rewards)
        return Reward(
            value=float(value),
            components={k: float(v) for k, v in rewards.items()},
            info={
                "task": spec.name,
                "format": spec.format,
                "test_exit_code": run.exit_code,
                "test_s": round(time.monotonic() - started, 2),
                "test_output": log,
            },
        )


def _untouched_key(spec: HarborTask, sandbox_spec: SandboxSpec | None) -> str:
    """What the verdict on an untouched image depends on: the container (image and
    limits), the tests' files, the verifier's user and environment."""
    h = hashlib.sha256()
    h.update(sandbox_spec.model_dump_json().encode() if sandbox_spec else b"")
    h.update(json.dumps([spec.name, spec.test_script, spec.verifier_user,
                         resolve_env(spec.verifier_env, spec.name),
                         spec.verifier_timeout_s]).encode())  # fmt: skip
    for path in sorted(spec.tests_dir.rglob("*")):
        h.update(path.relative_to(spec.tests_dir).as_posix().encode() + b"\0")
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def _parse_rewards(files: dict[str, bytes], log: str) -> dict[str, float]:
    """Harbor's ``_parse_reward_json`` / ``_parse_reward_text``: reward.json first."""
    where = f"; test output ends: {log[-500:]}"
    for name in ("reward.json", "reward.txt"):
        if name not in files:
            continue
        if not files[name].strip():
            raise VerifierError(f"RewardFileEmptyError: {VERIFIER_DIR}/{name} is empty{where}")
        try:
            if name == "reward.txt":
                rewards: Any = {"reward": float(files[name].decode())}
            else:
                rewards = json.loads(files[name])
                if not isinstance(rewards, dict):
                    rewards = {"reward": rewards}
        except (ValueError, UnicodeDecodeError):
            raise VerifierError(
                f"VerifierOutputParseError: {VERIFIER_DIR}/{name} is not a reward{where}"
            ) from None
        for key, value in rewards.items():
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value)):  # fmt: skip
                raise VerifierError(
                    f"VerifierOutputParseError: reward {key}={value!r} in {name} is not a "
                    f"finite number{where}"
                )
        if not rewards:
            raise VerifierError(f"RewardFileEmptyError: {VERIFIER_DIR}/{name} is {{}}{where}")
        return {str(k): float(v) for k, v in rewards.items()}
    raise VerifierError(
        f"RewardFileNotFoundError: test.sh wrote neither {VERIFIER_DIR}/reward.json nor "
        f"reward.txt{where}"
    )


def _solve_command(spec: HarborTask) -> str:
    """Harbor's ``OracleAgent`` as one terminal command: the solution directory into
    ``/solution``, then ``solve.sh`` run from the working directory with the task's
    ``[solution] env``."""
    env = resolve_env(spec.solution_env, spec.name)
    exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())
    return (
        f"echo {spec.solution_b64} | base64 -d | tar -xzf - -C /solution && "
        f"chmod +x /solution/{spec.solve_script} && "
        f"{exports}DEBIAN_FRONTEND=noninteractive /solution/{spec.solve_script}"
    )


@functools.lru_cache(maxsize=1024)
def _image_workdir(image: str) -> str:
    """The image's WORKDIR, or ``/app`` (Harbor's templates' own) when it has none.
    Cached: a tag is a content hash, and local images the task names are not rebuilt
    under a running environment."""
    found = run_docker("image", "inspect", "-f", "{{.Config.WorkingDir}}", image).stdout.strip()
    return found if found not in ("", "/") else "/app"
