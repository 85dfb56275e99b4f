"""Harbor and Terminal-Bench task directories, read as Harbor reads them.

A **Harbor** task (``harbor.models.task``, schema 1.x) is a directory with ``task.toml``,
``instruction.md``, ``environment/Dockerfile`` (or ``[environment] docker_image``),
``tests/test.sh`` and ``solution/solve.sh``. A **Terminal-Bench** task (the
``terminal-bench`` wheel's template and its datasets) is ``task.yaml`` (the instruction
and timeouts), a ``Dockerfile`` at the top, ``run-tests.sh``, ``tests/`` and
``solution.sh``; it is mapped here the way Harbor's own ``TerminalBenchMapper`` maps it
(``harbor/mappers/terminal_bench.py``): the test script is ``run-tests.sh`` with
``$TEST_DIR`` replaced by ``/tests`` and the exit code written as the reward, the
Dockerfile gains ``ENV TEST_DIR=/tests``, ``solution.sh`` is the solution.

What Harbor has and this bridge does not run is refused when the task is loaded, with
the field named (multi-step tasks, a separate verifier environment, Windows, GPUs,
multi-container compose files): a task that silently ran differently would be scored
differently.
"""

from __future__ import annotations

import base64
import io
import math
import os
import re
import shutil
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envhub.errors import InvalidRequest
from envhub.runtime.cache import cache_root
from envhub.sandboxes.images import tree_digest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib  # type: ignore[import-not-found]

__all__ = ["HarborTask", "find_task_dirs", "load_task"]

#: Harbor's reward suffix for Terminal-Bench test scripts (TerminalBenchMapper's
#: REWARD_LOGGING_SUFFIX, verbatim): the exit code of run-tests.sh becomes the reward
_TB_REWARD_SUFFIX = """
_EXIT_CODE=$?
if [ $_EXIT_CODE -eq 0 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit $_EXIT_CODE
"""
#: files of a Terminal-Bench task that are not its image's build context
_TB_NOT_CONTEXT = {"task.yaml", "solution.sh", "solution.yaml", "run-tests.sh",
                   "docker-compose.yaml", "tests"}  # fmt: skip
_ENV_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}")
#: the solution travels inside one shell argument (Linux caps one at 128 KiB)
_MAX_SOLUTION_B64 = 96 * 1024


@dataclass(frozen=True)
class HarborTask:
    """One task, whatever its on-disk format, with what running and grading it needs."""

    name: str
    root: Path
    format: str  # "harbor" or "terminal-bench"
    instruction: str
    context_dir: Path | None  # the image's build context; None with a prebuilt image
    docker_image: str | None
    tests_dir: Path  # uploaded to /tests after the agent has finished
    test_script: str  # relative to tests_dir
    solution_b64: str | None  # the solution directory, tar.gz, base64; None without one
    solve_script: str = "solve.sh"
    agent_timeout_s: float | None = None
    verifier_timeout_s: float = 600.0
    build_timeout_s: float = 600.0
    network: bool = False
    cpus: float | None = None
    memory_mb: int | None = None
    workdir: str | None = None
    agent_user: str | None = None
    verifier_user: str | None = None
    verifier_env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


def find_task_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """``path`` itself when it is a task, else its task subdirectories (sorted)."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise InvalidRequest(f"no task directory at {root}")
    if _is_task(root):
        return [root]
    found = sorted(p for p in root.iterdir() if p.is_dir() and _is_task(p))
    if not found:
        raise InvalidRequest(
            f"{root} holds no Harbor task (task.toml) or Terminal-Bench task (task.yaml)"
        )
    return found


def _is_task(p: Path) -> bool:
    return (p / "task.toml").is_file() or (p / "task.yaml").is_file()


def load_task(root: Path) -> HarborTask:
    """Read one task directory (:class:`InvalidRequest` naming what is missing or does
    not map)."""
    if (root / "task.toml").is_file():
        return _load_harbor(root)
    return _load_terminal_bench(root)


def _fail(root: Path, why: str) -> InvalidRequest:
    return InvalidRequest(f"task {root.name}: {why}")


def _table(data: dict[str, Any], key: str, root: Path) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise _fail(root, f"[{key}] must be a table")
    return value


def _number(table: dict[str, Any], key: str, default: float | None, root: Path) -> float | None:
    value = table.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(root, f"{key} must be a finite number, not {value!r}")
    if value <= 0:
        raise _fail(root, f"{key} must be > 0, not {value!r}")
    return float(value)


def _user(value: Any, root: Path, key: str) -> str | None:
    """Harbor's ``user`` (a name or a uid) as docker's ``-u`` takes it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _fail(root, f"{key} must be a user name or uid")
    return str(value)


def _env_table(table: dict[str, Any], root: Path, key: str) -> dict[str, str]:
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise _fail(root, f"[{key}].env must map names to strings")
    return {str(k): v for k, v in env.items()}


def resolve_env(env: dict[str, str], task: str) -> dict[str, str]:
    """Harbor's ``resolve_env_vars``: a value that is exactly ``${VAR}`` or
    ``${VAR:-default}`` is read from the host's environment, others pass unchanged."""
    out = {}
    for key, value in env.items():
        m = _ENV_TEMPLATE.fullmatch(value)
        if m is None:
            out[key] = value
        elif m.group(1) in os.environ:
            out[key] = os.environ[m.group(1)]
        elif m.group(2) is not None:
            out[key] = m.group(2)
        else:
            raise InvalidRequest(f"task {task}: environment variable {m.group(1)} is not set")
    return out


def _load_harbor(root: Path) -> HarborTask:
    try:
        data = tomllib.loads((root / "task.toml").read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _fail(root, f"task.toml is unreadable: {exc}") from None
    env = _table(data, "environment", root)
    verifier = _table(data, "verifier", root)
    agent = _table(data, "agent", root)
    solution = _table(data, "solution", root)
    if data.get("steps"):
        raise _fail(root, "multi-step tasks ([[steps]]) do not map to one envhub episode")
    if verifier.get("environment_mode") == "separate" or verifier.get("environment"):
        raise _fail(root, "a separate verifier environment ([verifier] environment) is not "
                          "supported: the verifier runs in the agent's container (shared mode)")
    if str(env.get("os", "linux")).lower() != "linux":
        raise _fail(root, f"[environment] os = {env['os']!r}: only linux containers run here")
    if env.get("gpus") or env.get("tpu"):
        raise _fail(root, "GPU/TPU tasks are not supported by this bridge")
    env_dir = root / "environment"
    if (env_dir / "docker-compose.yaml").exists() or (env_dir / "docker-compose.yml").exists():
        raise _fail(root, "multi-container tasks (environment/docker-compose.yaml) do not map")
    docker_image = env.get("docker_image")
    if docker_image is not None and not isinstance(docker_image, str):
        raise _fail(root, "[environment] docker_image must be a string")
    if docker_image is None and not (env_dir / "Dockerfile").is_file():
        raise _fail(root, "no environment/Dockerfile and no [environment] docker_image")
    instruction = _read(root / "instruction.md", root)
    if not (root / "tests" / "test.sh").is_file():
        raise _fail(root, "no tests/test.sh")
    mode = env.get("network_mode")
    if mode is None and env.get("allow_internet") is not None:
        mode = "public" if env["allow_internet"] else "no-network"
    if mode not in (None, "public", "no-network", "allowlist"):
        raise _fail(root, f"unknown [environment] network_mode {mode!r}")
    memory = _number(env, "memory_mb", None, root)
    workdir = env.get("workdir")
    if workdir is not None and not (isinstance(workdir, str) and workdir.startswith("/")):
        raise _fail(root, "[environment] workdir must be an absolute path")
    solution_dir = root / "solution"
    return HarborTask(
        name=root.name,
        root=root,
        format="harbor",
        instruction=instruction,
        context_dir=env_dir if docker_image is None else None,
        docker_image=docker_image,
        tests_dir=root / "tests",
        test_script="test.sh",
        solution_b64=_pack_solution(solution_dir, root) if solution_dir.is_dir() else None,
        agent_timeout_s=_number(agent, "timeout_sec", None, root),
        verifier_timeout_s=_number(verifier, "timeout_sec", 600.0, root) or 600.0,
        build_timeout_s=_number(env, "build_timeout_sec", 600.0, root) or 600.0,
        # Harbor's default is public; envhub's is no network unless the task says so
        network=mode == "public",
        cpus=_number(env, "cpus", None, root),
        memory_mb=int(memory) if memory is not None else None,
        workdir=workdir,
        agent_user=_user(agent.get("user"), root, "[agent] user"),
        verifier_user=_user(verifier.get("user"), root, "[verifier] user"),
        verifier_env=_env_table(verifier, root, "verifier"),
        solution_env=_env_table(solution, root, "solution"),
        metadata=data.get("metadata", {}) if isinstance(data.get("metadata"), dict) else {},
    )


def _load_terminal_bench(root: Path) -> HarborTask:
    try:
        data = yaml.safe_load((root / "task.yaml").read_text("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _fail(root, f"task.yaml is unreadable: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("instruction"), str):
        raise _fail(root, "task.yaml has no instruction")
    if not (root / "Dockerfile").is_file():
        raise _fail(root, "no Dockerfile")
    if not (root / "run-tests.sh").is_file():
        raise _fail(root, "no run-tests.sh")
    compose = root / "docker-compose.yaml"
    if compose.is_file():
        services = (yaml.safe_load(compose.read_text("utf-8")) or {}).get("services") or {}
        if len(services) > 1:
            raise _fail(root, "multi-container tasks (several compose services) do not map")
    staged = cache_root("harbor") / "terminal-bench" / f"{root.name}-{tree_digest(root)[:12]}"
    if not (staged / "done").is_file():
        _stage_terminal_bench(root, staged)
    solution = staged / "solution"
    return HarborTask(
        name=root.name,
        root=root,
        format="terminal-bench",
        instruction=data["instruction"],
        context_dir=staged / "environment",
        docker_image=None,
        tests_dir=staged / "tests",
        test_script="test.sh",
        solution_b64=_pack_solution(solution, root) if solution.is_dir() else None,
        agent_timeout_s=_number(data, "max_agent_timeout_sec", 360.0, root),
        verifier_timeout_s=_number(data, "max_test_timeout_sec", 60.0, root) or 60.0,
        network=False,
        # terminal-bench's base images all work in /app (their Dockerfiles' WORKDIR)
        workdir="/app",
        metadata={k: data[k] for k in ("difficulty", "category", "tags") if k in data},
    )


def _stage_terminal_bench(root: Path, staged: Path) -> None:
    """Lay a Terminal-Bench task out as Harbor's mapper does, in the cache."""
    tmp = staged.with_name(staged.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    context, tests = tmp / "environment", tmp / "tests"
    context.mkdir(parents=True)
    dockerfile = (root / "Dockerfile").read_text("utf-8")
    for item in root.iterdir():
        copied = item.name == "tests" and re.search(r"(COPY|ADD)\s+(\./)?tests", dockerfile)
        if item.name in _TB_NOT_CONTEXT and not copied:
            continue
        if item.is_dir():
            shutil.copytree(item, context / item.name, symlinks=True)
        else:
            shutil.copy2(item, context / item.name)
    suffix = "" if dockerfile.endswith("\n") else "\n"
    (context / "Dockerfile").write_text(dockerfile + suffix + "\nENV TEST_DIR=/tests\n")
    if (root / "tests").is_dir():
        shutil.copytree(root / "tests", tests, symlinks=True)
    else:
        tests.mkdir()
    script = (root / "run-tests.sh").read_text("utf-8")
    script = (script if script.endswith("\n") else script + "\n") + _TB_REWARD_SUFFIX
    (tests / "test.sh").write_text(script.replace("$TEST_DIR", "/tests"))
    if (root / "solution.sh").is_file():
        (tmp / "solution").mkdir()
        shutil.copy2(root / "solution.sh", tmp / "solution" / "solve.sh")
    (tmp / "done").write_text("")
    if not (staged / "done").is_file():
        shutil.rmtree(staged, ignore_errors=True)  # a half-staged copy, if any
    try:
        os.replace(tmp, staged)
    except OSError:  # another process staged the same content first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (staged / "done").is_file():
            raise


def _read(path: Path, root: Path) -> str:
    try:
        return path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(root, f"{path.name} is unreadable: {exc}") from None


def _pack_solution(solution_dir: Path, root: Path) -> str | None:
    """The solution directory as base64 of a tar.gz: the gold action's payload."""
    if not (solution_dir / "solve.sh").is_file():
        return None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(solution_dir.rglob("*")):
            info = tar.gettarinfo(str(path), str(path.relative_to(solution_dir)))
            info.uid = info.gid = 1000
            info.uname = info.gname = ""
            info.mtime = 0
            if path.is_file():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            elif path.is_dir():
                tar.addfile(info)
    text = base64.b64encode(buf.getvalue()).decode()
    if len(text) > _MAX_SOLUTION_B64:
        raise _fail(root, f"solution/ is too large to replay as one command "
                          f"({len(text)} base64 bytes > {_MAX_SOLUTION_B64})")
    return text
