"""What the verifiers bridge costs: a tool step and an episode's scoring through envhub
against the same verifiers code called directly, in one run.

Native (in the verifiers venv, a child process): the ``vf_arith`` test taskset's
``Calculator`` toolset registered on an in-process ``MCPServer`` as verifiers registers it,
``call_tool("add", ...)`` timed per call (verifiers' own harness reaches the same server
over HTTP, which costs more: this is the strict baseline), and ``Task.score`` on a
two-turn trace built with verifiers' graph API. Bridge (this process): an in-process
envhub session over the ``verifiers`` environment, ``step`` with one
``calculator_add`` call timed per step, and the final answer's step with ``close`` (the
episode ends there: its scoring through the worker) per episode. Judged scoring: the
same on ``vf_judged``, whose reference and rubric judges ask the scripted model server (a
process of its own, answering every judge prompt with one reply both judges parse),
natively ``Task.score`` on a one-answer trace, through the bridge an episode's final
step and ``close``. Prints the medians and the ratios bridge / native.

    python benchmarks/verifiers_bridge.py --episodes 20 --steps 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _scripted_model import load_note, scripted_server_process
from envhub_verifiers import VerifiersEnv, default_python

import envhub

TASKSETS = Path(__file__).parents[1] / "environments" / "verifiers" / "tests" / "vf_tasksets"

NATIVE = """
import asyncio, json, statistics, sys, time
import verifiers.v1 as vf
from mcp.server.mcpserver import MCPServer
from verifiers.v1.dialects.chat import parse_message
from verifiers.v1.graph import prepare_turn
from vf_arith import ArithTaskset, Calculator

episodes, steps, judged_args = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])

def one_answer_trace(task, wire):
    messages = [parse_message(m) for m in wire]
    trace = vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key),
                     agent=vf.AgentInfo(config=vf.AgentConfig(runtime=vf.SubprocessConfig())))
    for i, m in enumerate(messages):
        if m.role == "assistant":
            prepare_turn(trace, messages[:i]).commit(
                vf.Response(id=str(i), created=0, model="m", message=m, finish_reason="stop"))
    return trace

async def main():
    config = vf.resolve_env_config({"taskset": {"id": "vf_arith"}})
    task = next(iter(vf.load_taskset(config.taskset)))
    step_s, score_s = [], []
    for _ in range(episodes):
        server = MCPServer("calculator")
        Calculator(vf.ToolsetConfig()).register(server)
        for _ in range(steps):
            t = time.perf_counter()
            await server.call_tool("add", {"a": 2, "b": 3})
            step_s.append(time.perf_counter() - t)
        wire = [{"role": "user", "content": task.data.prompt},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                 "function": {"name": "calculator_add", "arguments": '{"a": 2, "b": 3}'}}]},
                {"role": "tool", "tool_call_id": "c", "content": "5"},
                {"role": "assistant", "content": "5"}]
        trace = one_answer_trace(task, wire)
        t = time.perf_counter()
        await task.score(trace)
        score_s.append(time.perf_counter() - t)
    config = vf.resolve_env_config({"taskset": {"id": "vf_judged", **judged_args}})
    judged = next(iter(vf.load_taskset(config.taskset)))
    judged_s = []
    for _ in range(episodes):
        judged_trace = one_answer_trace(judged, [{"role": "user", "content": judged.data.prompt},
                                                 {"role": "assistant", "content": "5"}])
        t = time.perf_counter()
        await judged.score(judged_trace)
        judged_s.append(time.perf_counter() - t)
    print(json.dumps({"step_s": statistics.median(step_s), "score_s": statistics.median(score_s),
                      "judged_s": statistics.median(judged_s), "reward": trace.reward,
                      "judged_reward": judged_trace.reward}))

asyncio.run(main())
"""


# one reply for both judges: the rubric judge takes its first JSON object with "verdicts",
# the reference judge the FINAL VERDICT line
JUDGE_REPLY = json.dumps({"verdicts": [
    {"name": "numeric", "reason": "a bare number", "verdict": "yes"},
    {"name": "explained", "reason": "no steps", "verdict": "no"}]}) + "\nFINAL VERDICT: yes"


def judged_args(base_url: str) -> dict[str, object]:
    """``vf_judged``'s judges (as its tests plug them) at the judge endpoint."""
    endpoint = {"base_url": base_url, "model": "judge"}
    return {"task": {"judges": [
        {"id": "reference", "weight": 2.0, **endpoint},
        {"id": "rubric", "path": str(TASKSETS / "vf_judged_rubric.toml"), "view": "last_reply",
         **endpoint}]}}  # fmt: skip


def native(episodes: int, steps: int, judges: dict[str, object]) -> dict[str, float]:
    done = subprocess.run(
        [str(default_python()), "-c", NATIVE, str(episodes), str(steps), json.dumps(judges)],
        capture_output=True, text=True, check=True, cwd=TASKSETS,
        env={"PYTHONPATH": str(TASKSETS), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


async def judged_bridge(episodes: int, judges: dict[str, object]) -> dict[str, float]:
    """Median seconds of an episode's final step and ``close`` (its judged scoring)
    through the bridge."""
    env = envhub.make("verifiers", taskset="vf_judged", path=str(TASKSETS), taskset_args=judges)
    task_id = (await env.task_ids())[0]
    score_s, reward = [], None
    for episode in range(episodes + 1):  # the first one warms the worker up
        async with env.open(task_id) as session:
            await session.reset()
            t = time.perf_counter()
            await session.step([], content="5")  # the final answer: scored here
            reward = (await session.close()).reward
            if episode:
                score_s.append(time.perf_counter() - t)
    return {"judged_s": statistics.median(score_s), "judged_reward": float(reward or 0.0)}


async def bridge(episodes: int, steps: int, judges: dict[str, object]) -> dict[str, float]:
    env = envhub.make("verifiers", taskset="vf_arith", path=str(TASKSETS))
    task_id = (await env.task_ids())[0]
    step_s, score_s, reward = [], [], None
    for episode in range(episodes + 1):  # the first one warms the worker up
        async with env.open(task_id) as session:
            await session.reset()
            for i in range(steps):
                call = {"id": f"c{i}", "name": "calculator_add", "arguments": '{"a": 2, "b": 3}'}
                t = time.perf_counter()
                await session.step([call])
                if episode:
                    step_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            await session.step([], content="5")  # the final answer: scored here
            reward = (await session.close()).reward
            if episode:
                score_s.append(time.perf_counter() - t)
    judged = await judged_bridge(episodes, judges)
    await VerifiersEnv.aclose_shared()
    return {"step_s": statistics.median(step_s), "score_s": statistics.median(score_s),
            "reward": float(reward or 0.0), **judged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    with scripted_server_process("--reply", JUDGE_REPLY) as judge:
        judges = judged_args(judge.base_url)
        theirs = native(args.episodes, args.steps, judges)
        ours = asyncio.run(bridge(args.episodes, args.steps, judges))
    print(load_note())
    print(f"{'':>22} {'native':>10} {'bridge':>10} {'ratio':>7}")
    for key, label in (("step_s", "tool step (median)"), ("score_s", "scoring (median)"),
                       ("judged_s", "judged scoring")):
        print(f"{label:>22} {theirs[key] * 1e3:>8.3f}ms {ours[key] * 1e3:>8.3f}ms "
              f"{ours[key] / theirs[key]:>6.1f}x")
    print(f"{'overhead per step':>22} {(ours['step_s'] - theirs['step_s']) * 1e3:>19.3f}ms")
    print(f"rewards of the scored episodes: native {theirs['reward']}, bridge {ours['reward']}; "
          f"judged: native {theirs['judged_reward']}, bridge {ours['judged_reward']}")


if __name__ == "__main__":
    sys.exit(main())
