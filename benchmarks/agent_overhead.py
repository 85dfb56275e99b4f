"""The agent-framework path against ``envhub rollout``'s own loop: episodes/s, same run.

Workload: ``calc`` in-process, the scripted OpenAI-compatible server (zero latency, token
ids on) in a separate process playing the model's 3 turns. Both paths write trajectories
through the same dispatcher at the same concurrency:

- ``envhub rollout``: the policy loop (:class:`envhub.rollout.EpisodeRunner`), 3 model
  calls and 3 steps per episode.
- ``--agent openai-agents``: per episode an MCP endpoint (Streamable HTTP, uvicorn) and a
  capture proxy (aiohttp) on ephemeral ports, and an OpenAI Agents SDK run that connects
  to both; the agent makes a 4th model call after the terminal tool (it cannot know the
  episode ended) and lists the tools over MCP first.

Rounds alternate the two paths (adjacent runs share the machine's load); the verdict is
the median ratio of episodes/s, printed beside the median ratio of harness CPU per
episode (the steadier figure on a loaded machine).

    .venv/bin/python benchmarks/agent_overhead.py [--episodes 200] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _scripted_model import load_note, run, scripted_server_process

import envhub
from envhub._util.gc_tuning import gc_tuned_for_throughput
from envhub.agents import AgentEpisodeRunner, OpenAIAgentsRunner
from envhub.policies import make_policy
from envhub.rollout.dispatcher import run_rollout
from envhub.rollout.episode import EpisodeRunner


async def rollout(
    base_url: str, episodes: int, concurrency: int, out: Path, agent: bool
) -> tuple[float, float, int]:
    """(wall seconds, harness CPU seconds, episodes that did not end on the answer tool)."""
    env = envhub.make("calc")
    policy = make_policy("openai", model="scripted", base_urls=[base_url])
    runner = (
        AgentEpisodeRunner(env, policy, OpenAIAgentsRunner(), env_version=env.version)
        if agent
        else EpisodeRunner(env, policy, env_version=env.version)
    )
    task_ids = (await env.task_ids(None))[:episodes]
    wall, cpu = time.perf_counter(), time.process_time()
    summary = await run_rollout(runner, task_ids, out, group_size=1, concurrency=concurrency)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await policy.aclose()
    errors = summary.masked + sum(n for k, n in summary.stop_reasons.items()
                                  if k != "terminal_tool")
    return wall, cpu, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    envhub.make("calc").tasks  # load the task set before timing  # noqa: B018
    n, c = args.episodes, args.concurrency
    with (gc_tuned_for_throughput(), scripted_server_process("--token-ids") as server,
          tempfile.TemporaryDirectory() as tmp):
        print(f"calc, {n} episodes per run at concurrency {c}, zero-latency scripted server; "
              f"{load_note()}")
        print(f"{'round':<7}{'path':<26}{'episodes/s':>12}{'harness ms/ep':>15}{'errors':>8}")
        ratios, cpu_ratios = [], []
        for index in range(args.rounds):
            rates, cpus = {}, {}
            for label, agent in (("envhub rollout loop", False), ("--agent openai-agents", True)):
                out = Path(tmp) / f"{index}-{agent}.jsonl"
                wall, cpu, errors = run(rollout(server.base_url, n, c, out, agent))  # type: ignore[misc]
                rates[agent], cpus[agent] = n / wall, cpu / n
                print(f"{index:<7}{label:<26}{n / wall:>12.1f}{1000 * cpu / n:>15.2f}{errors:>8}")
            ratios.append(rates[True] / rates[False])
            cpu_ratios.append(cpus[True] / cpus[False])
        print(
            f"agent path / rollout loop, episodes/s: median {statistics.median(ratios):.3f} "
            f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)}); harness CPU per episode: "
            f"median {statistics.median(cpu_ratios):.1f}x"
        )


if __name__ == "__main__":
    main()
