"""Episodes in real Docker sandboxes: gold fixes score 1, doing nothing or editing the
tests scores 0, runaway commands are cut off, and no container outlives the pools."""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import envhub
from envhub import StepResult
from envhub.sandboxes.docker_cli import run_docker
from envhub.testing import check_environment

CallTool = Callable[..., Awaitable[StepResult]]  # the `call` fixture (conftest.py)

pytestmark = pytest.mark.usefixtures("swe_images")


def test_gold_scores_one_and_noop_zero_on_the_ci_subset(ci_task_ids: list[str]) -> None:
    assert len(ci_task_ids) >= 2
    report = check_environment("swe", task_ids=ci_task_ids, sandbox="docker", concurrency=4)
    assert report.checked == len(ci_task_ids)


def _f2p_file(task: envhub.Task) -> str:
    return task.metadata["FAIL_TO_PASS"][0].split("::")[0]


async def test_editing_the_tests_scores_zero(ci_task_ids: list[str], call: CallTool) -> None:
    env = envhub.make("swe", sandbox="docker")
    task = env.tasks.get(ci_task_ids[0])
    test_file = _f2p_file(task)
    session = await env.open(task.id)
    # the failing tests replaced by trivial ones, and a conftest that skips the rest
    out = await call(
        session,
        "bash",
        command=f"printf 'def test_ok():\\n    pass\\n' > {shlex.quote(test_file)} && "
        "printf 'import pytest\\ncollect_ignore_glob = [\"*\"]\\n' > conftest.py",
    )
    assert "<returncode>0</returncode>" in out.observations[0].content
    await call(session, "submit")
    result = await session.close()
    assert result.reward == 0.0
    assert result.info["reason"] == "empty diff" and result.components["patch_applied"] == 0.0

    # tests "fixed" plus a wrong source change: graded on pristine tests, still 0
    session = await env.open(task.id)
    source = task.metadata["gold_edits"][0]["path"]
    await call(session, "bash", command=f"echo '# touched' >> {source} && rm -rf {test_file}")
    await call(session, "submit")
    result = await session.close()
    assert result.reward == 0.0 and result.components["patch_applied"] == 1.0
    assert result.components["f2p"] < 1.0 and result.info["resolution"] == "NO"

    # a broken repository is the agent's loss (scored 0), not an infra failure (masked)
    session = await env.open(task.id)
    await call(session, "bash", command="rm -rf .git")
    result = await session.close()
    assert result.reward == 0.0 and result.info["reason"].startswith("git could not diff")


async def test_runaway_command_is_cut_off_and_the_episode_goes_on(
    ci_task_ids: list[str], call: CallTool
) -> None:
    env = envhub.make("swe", sandbox="docker", command_timeout_s=2.0)
    task = env.tasks.get(ci_task_ids[0])
    session = await env.open(task.id)
    slow = (await call(session, "bash", command="while true; do :; done")).observations[0]
    assert "timed out after 2s" in slow.content and not session.done
    alive = await call(session, "bash", command="echo still-here && git status --short")
    assert "still-here" in alive.observations[0].content
    tests = (await call(session, "run_tests", paths=[_f2p_file(task)])).observations[0]
    assert "pytest exit code 1" in tests.content and "FAILED" in tests.content
    refused = (await call(session, "run_tests", paths=["setup.py"])).observations[0]
    assert refused.is_error and "not one of the repository's tests" in refused.content
    for gold in task.gold_actions:
        await call(session, gold.name, **gold.arguments)
    result = await session.close()
    assert result.reward == 1.0 and result.components == {
        "patch_applied": 1.0,
        "f2p": 1.0,
        "p2p": 1.0,
    }


def test_swebench_instance_on_a_locally_built_image(
    ci_task_ids: list[str], swe_images: dict[str, str], tmp_path: Path
) -> None:
    """A SWE-bench record (no envhub extras; a test patch adds the failing test) whose
    image holds the repository at its buggy base commit, as SWE-bench's images do."""
    env = envhub.make("swe", sandbox="docker")
    task = env.tasks.get(ci_task_ids[0])
    record = task.metadata
    repo_name = record["repo"].removeprefix("pypi/")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "bug.patch").write_text(record["bug_patch"])
    identity = " ".join(
        f"-c {k}={v}" for k, v in (("user.name", "envhub"), ("user.email", "envhub@localhost"))
    )
    (ctx / "Dockerfile").write_text(
        f"FROM {swe_images[repo_name]}\nCOPY --chown=1000:1000 bug.patch /tmp/bug.patch\n"
        f"RUN cd /opt/repo && git apply /tmp/bug.patch && git {identity} commit -qam bug\n"
    )
    tag = "envhub/swe-test-instance:latest"
    run_docker("build", "--network", "none", "--force-rm", "-q", "-t", tag, str(ctx), check=True)
    try:
        head = run_docker("run", "--rm", "--network", "none", tag, "git", "-C", "/opt/repo",
                          "rev-parse", "HEAD", check=True).stdout.strip()  # fmt: skip
        f2p = record["FAIL_TO_PASS"][0]
        test_module = f2p.split("::")[0]
        # the test patch adds a test file that imports the failing test under a new name
        new_test = "test_issue_regression.py"
        module = Path(test_module).with_suffix("").as_posix().replace("/", ".")
        body = f"from {module} import *  # noqa\n"
        test_patch = (
            f"diff --git a/{new_test} b/{new_test}\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/{new_test}\n@@ -0,0 +1 @@\n+{body}"
        )
        instance = {
            "instance_id": "local__inflection-1",
            "repo": "local/inflection",
            "version": record["version"],
            "base_commit": head,
            "patch": record["patch"],
            "test_patch": test_patch,
            "FAIL_TO_PASS": json.dumps([f"{new_test}::{f2p.split('::', 1)[1]}".split()[0]]),
            # SWE-bench's lists carry ids as its whitespace-splitting log parser cut them
            "PASS_TO_PASS": json.dumps(
                [
                    f"{new_test}::{t.split('::', 1)[1]}".split()[0]
                    for t in record["PASS_TO_PASS"][:20]
                    if t.startswith(test_module)
                ]
            ),
            "problem_statement": record["problem_statement"],
        }
        path = tmp_path / "swebench.jsonl"
        path.write_text(json.dumps(instance) + "\n")
        report = check_environment(
            "swe",
            sandbox="docker",
            swebench=str(path),
            image_template=tag,
            repo_dir="/opt/repo",
            venv="/opt/venv",
        )
        assert report.checked == 1
    finally:
        run_docker("image", "rm", "-f", tag)
