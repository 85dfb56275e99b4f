"""Judge overhead: what an LLM judge adds to each episode, and its cache's hit rate.

Workload: a one-turn question-answering environment in-process (its policy answers each
question in one message), C=64, the policy and the judge each a zero-latency scripted
OpenAI-compatible server in its own process. In one process, alternating: a run whose
reward is a program (exact match), and the same run whose reward is a
:class:`~envhub.rewards.judge.ReferenceJudge` (limit 64, so it measures cost, not
throttling). Every answer differs (the policy server writes a random note into each), so
the judge's cache never answers: the overhead is the judge's request, its parsing and
its record. Then a run whose groups of 8 answer alike, the judge's cache hit rate.

    .venv/bin/python benchmarks/judge_overhead.py [--episodes 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from _scripted_model import load_note, run, scripted_server_process

from envhub import Environment
from envhub.clients.local import LocalEnvironment
from envhub.policies import make_policy
from envhub.policies.judge import OpenAIJudgeEndpoint
from envhub.rewards import exact_match
from envhub.rewards.judge import JudgeEndpointConfig, ReferenceJudge
from envhub.rollout.dispatcher import run_rollout
from envhub.rollout.episode import EpisodeRunner
from envhub.task import Task, TaskSet
from envhub.types import Reward

CONCURRENCY = 64


class BenchQA(Environment):
    """``num_tasks`` one-line questions; rewarded by exact match, or by ``judge``."""

    name = "bench-qa"
    judge: ReferenceJudge | None = None  # set on the class by the benchmark: one per run

    def __init__(self, num_tasks: int = 2000) -> None:
        self.num_tasks = num_tasks

    def load_tasks(self) -> TaskSet:
        return TaskSet(
            Task(id=f"q{i}", prompt=[{"role": "user", "content": f"Question {i}?"}],
                 answer="done", split="test")
            for i in range(self.num_tasks)
        )  # fmt: skip

    async def reward(self) -> Reward | float:
        answer = self.final_answer or ""
        if self.judge is None:
            return exact_match(answer, str(self.task.answer))
        verdict = await self.judge.judge(
            question=self.task.prompt[0]["content"], reference=str(self.task.answer),
            answer=answer,
        )  # fmt: skip
        return verdict.reward()


async def one_run(policy_url: str, judge: ReferenceJudge | None, episodes: int,
                  group_size: int = 1) -> tuple[float, float, int]:  # fmt: skip
    """(wall s, harness CPU s, masked episodes) of ``episodes`` episodes at C=64."""
    BenchQA.judge = judge
    env = LocalEnvironment(BenchQA, {"num_tasks": episodes // group_size})
    policy = make_policy("openai", model="policy", base_urls=[policy_url])
    runner = EpisodeRunner(env, policy, env_version="0")
    task_ids = await env.task_ids(None)
    env.tasks  # noqa: B018 - loaded before the clock starts
    wall, cpu = time.perf_counter(), time.process_time()
    summary = await run_rollout(runner, task_ids, None, group_size=group_size,
                                concurrency=CONCURRENCY)  # fmt: skip
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await policy.aclose()
    if judge is not None:
        await judge.aclose()
    return wall, cpu, summary.masked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    verdict = "The answer matches.\nVERDICT: CORRECT"
    with (
        scripted_server_process("--reply", "done", "--distinct-samples") as distinct,
        scripted_server_process("--reply", "done") as alike,
        scripted_server_process("--reply", verdict) as judge_server,
    ):
        config = JudgeEndpointConfig(base_urls=(judge_server.base_url,), model="judge")

        def judge() -> ReferenceJudge:
            return ReferenceJudge(OpenAIJudgeEndpoint(config), max_concurrency=CONCURRENCY)

        rows: dict[str, list[tuple[float, float, int]]] = {"program": [], "judge": []}
        for _ in range(args.rounds):  # alternating, so load drifts hit both alike
            rows["program"].append(run(one_run(distinct.base_url, None, args.episodes)))  # type: ignore[arg-type]
            rows["judge"].append(run(one_run(distinct.base_url, judge(), args.episodes)))  # type: ignore[arg-type]
        cached = judge()
        alike_run: Any = run(one_run(alike.base_url, cached, args.episodes, group_size=8))
    n = args.episodes
    print(f"judge overhead, C={CONCURRENCY}, {n} one-turn episodes per run, median of "
          f"{args.rounds} rounds; {load_note()}")  # fmt: skip
    medians = {}
    for name, results in rows.items():
        wall = statistics.median(r[0] for r in results)
        cpu = statistics.median(r[1] for r in results)
        masked = sum(r[2] for r in results)
        medians[name] = (wall, cpu)
        print(f"  {name:8} reward: {1e3 * wall / n:6.3f} ms wall/episode  "
              f"{1e3 * cpu / n:6.3f} ms CPU/episode  {n / wall:7.0f} episodes/s  "
              f"masked {masked}")  # fmt: skip
    (pw, pc), (jw, jc) = medians["program"], medians["judge"]
    print(f"  judge overhead per episode: {1e3 * (jw - pw) / n:.3f} ms wall, "
          f"{1e3 * (jc - pc) / n:.3f} ms CPU (harness); ratio to no judge: "
          f"wall {jw / pw:.2f}x, CPU {jc / pc:.2f}x")  # fmt: skip
    asked = cached.requests + cached.cache_hits
    print(f"  cache, groups of 8 answering alike ({n} episodes, masked {alike_run[2]}): "
          f"{cached.cache_hits} of {asked} verdicts from the cache "
          f"({cached.cache_hits / asked:.1%}), {cached.requests} requests")  # fmt: skip


if __name__ == "__main__":
    main()
