"""The step overhead of the openenv bridge: one OpenEnv server, driven by OpenEnv's own
client and by envhub through the bridge, in one run.

The server is ``openenv_calc.py serve`` (calc's ``calculate`` as an OpenEnv
environment) in the OpenEnv venv (``bash .ci/openenv_setup.sh``). At each concurrency C,
C OpenEnv ``EnvClient`` sessions (``openenv_calc.py drive``, in that venv) and then C
envhub sessions of ``openenv`` (``--env-arg url=...``, the tool named ``calculate``) loop
episodes of connect + reset, N steps (``expression="1+1"``), close, timed by the same
loop (``_load.drive``: only the step round trips). An envhub step through the bridge is
OpenEnv's step plus envhub's session (schema check, budgets, the observation, metrics);
the ratio says what that costs.

    .venv/bin/python benchmarks/openenv_bridge.py --concurrency 1 8 --duration 5

``--image`` compares instead the bridge's two ways of running a server itself, on the
tests' ``adder`` server (its ``add`` tool): ``command=`` (a subprocess in the OpenEnv
venv) against ``image=`` (the image ``environments/openenv/tests/openenv_image.py``
builds, run with envhub's container policy: its port is reached through Docker's
proxy), one after the other at each concurrency.

    .venv/bin/python benchmarks/openenv_bridge.py --image --concurrency 1 8 --duration 5
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from _load import cpu_per_step, cpu_seconds, drive, percentiles_ms, report
from openenv_baseline import DEFAULT_PYTHON, drive_openenv, openenv_server, openenv_version

import envhub
from envhub.rollout.runtime import run_async

TESTS = Path(__file__).resolve().parents[1] / "environments" / "openenv" / "tests"
ADD = [{"id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}'}]


async def drive_bridge(url: str, concurrency: int, steps: int,
                       duration: float) -> tuple[Any, float, float]:
    env = envhub.make("openenv", url=url, seeds=1, action_tool="calculate",
                      max_turns=steps + 1)

    async def open_session(task_id: str) -> Any:
        return await env.open("seed-0")

    await (await open_session("warm")).close()  # the tool schema, learnt once
    cpu = time.process_time()
    try:
        run, elapsed = await drive(open_session, concurrency, steps, duration)
    finally:
        await env.aclose()
    return run, elapsed, time.process_time() - cpu


async def drive_source(concurrency: int, steps: int, duration: float,
                       **source: Any) -> tuple[Any, float]:
    """The bridge on the ``adder`` server that ``source`` (``command=`` or ``image=``)
    names; the server's start is not timed."""
    env = envhub.make("openenv", **source, tasks=str(TESTS / "adder.jsonl"),
                      max_turns=steps + 1)

    async def open_session(task_id: str) -> Any:
        return await env.open("add-0")

    await (await open_session("warm")).close()  # starts the server
    try:
        return await drive(open_session, concurrency, steps, duration, call=ADD)
    finally:
        await env.aclose()


async def image_against_command(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(TESTS))  # the tests' image builder
    from openenv_image import build_adder_image

    image = build_adder_image(args.openenv_python)
    command = [str(args.openenv_python), str(TESTS / "openenv_servers.py"), "adder",
               "--port", "{port}"]
    for c in args.concurrency:
        rates, p50s = [], []
        for label, source in (("command=", {"command": command}), ("image=", {"image": image})):
            run, elapsed = await drive_source(c, args.steps, args.duration, **source)
            rates.append(report(label, c, run, elapsed, ""))
            p50s.append(percentiles_ms(run)[0])
        print(f"           C={c}: image= / command=: p50 step latency "
              f"{p50s[1] / p50s[0]:.2f}x, steps/s {rates[1] / rates[0]:.2f}x", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=10, help="steps per episode")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per side and C")
    parser.add_argument("--openenv-python", type=Path, default=DEFAULT_PYTHON,
                        help="python of the venv where openenv is installed")
    parser.add_argument("--image", action="store_true",
                        help="compare the bridge over image= with command= (module docstring)")
    args = parser.parse_args()
    if not args.openenv_python.exists():
        raise SystemExit(f"{args.openenv_python} not found: bash .ci/openenv_setup.sh")
    print(f"openenv {openenv_version(args.openenv_python)}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (the figures share the machine)",
          flush=True)
    if args.image:
        await image_against_command(args)
        return
    with openenv_server(args.openenv_python, max(args.concurrency), threaded=False) as (url, pid):
        for c in args.concurrency:
            rates, p50s = [], []
            for label in ("openenv", "bridge"):
                server_cpu = cpu_seconds(pid)
                if label == "openenv":
                    run, elapsed, client_cpu = await drive_openenv(
                        args.openenv_python, url, c, args.steps, args.duration)
                else:
                    run, elapsed, client_cpu = await drive_bridge(url, c, args.steps,
                                                                  args.duration)
                server_cpu = cpu_seconds(pid) - server_cpu
                rates.append(report(label, c, run, elapsed, ""))
                print(cpu_per_step(server_cpu, client_cpu, run.steps))
                p50s.append(percentiles_ms(run)[0])
            print(f"           C={c}: bridge / OpenEnv's client: p50 step latency "
                  f"{p50s[1] / p50s[0]:.2f}x, steps/s {rates[1] / rates[0]:.2f}x", flush=True)


if __name__ == "__main__":
    run_async(main())
