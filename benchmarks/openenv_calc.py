"""OpenEnv's half of ``openenv_baseline.py``; runs in the OpenEnv virtual environment.

OpenEnv (``pip install openenv``) lives in its own venv (``.venv-openenv``) so its heavy
dependencies cannot disturb envhub's; that venv has no envhub, so this module imports only
OpenEnv, the standard library, ``_load`` (the episode loop envhub's benchmark uses) and
calc's ``calculator.py`` (standard library only), loaded from its file so that each step
does exactly the work calc's ``calculate`` tool does.

    serve --port P --max-sessions N     one uvicorn worker hosting the env (WebSocket /ws)
    drive --url U --concurrency C ...   C concurrent EnvClient sessions; prints one JSON line

calc's ``calculate`` is an ``async`` tool that envhub runs on the event loop, so the
like-for-like OpenEnv environment overrides ``reset_async``/``step_async``
(``AsyncCalcEnvironment``, the default). ``serve --threaded`` hosts the environment as
OpenEnv's template writes one instead: synchronous ``reset``/``step``, which the server
runs in a thread per session (slower here: a thread hop per message and a thread per
session).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

from _load import drive
from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_server import Environment, create_app
from openenv.core.env_server.types import Action, Observation, State

_CALCULATOR = (Path(__file__).resolve().parents[1]
               / "environments" / "calc" / "envhub_calc" / "calculator.py")
_spec = importlib.util.spec_from_file_location("calc_calculator", _CALCULATOR)
assert _spec is not None and _spec.loader is not None
calculator = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calculator)


class CalcAction(Action):
    expression: str


class CalcObservation(Observation):
    result: str = ""
    error: str = ""


class CalcEnvironment(Environment[CalcAction, CalcObservation, State]):
    """calc's ``calculate`` tool as an OpenEnv environment, synchronous as in OpenEnv's template."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> CalcObservation:
        self._state = State(episode_id=episode_id)
        return CalcObservation()

    def step(self, action: CalcAction, timeout_s: float | None = None,
             **kwargs: Any) -> CalcObservation:
        self._state.step_count += 1
        try:
            return CalcObservation(result=str(calculator.evaluate(action.expression)))
        except calculator.CalculatorError as exc:
            return CalcObservation(error=str(exc))

    @property
    def state(self) -> State:
        return self._state


class AsyncCalcEnvironment(CalcEnvironment):
    """The same steps on the server's event loop, as envhub runs calc's async tools."""

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None,
                          **kwargs: Any) -> CalcObservation:
        return self.reset(seed=seed, episode_id=episode_id)

    async def step_async(self, action: CalcAction, timeout_s: float | None = None,
                         **kwargs: Any) -> CalcObservation:
        return self.step(action)


class CalcClient(EnvClient[CalcAction, CalcObservation, State]):
    def _step_payload(self, action: CalcAction) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[CalcObservation]:
        observation = CalcObservation(**payload.get("observation", {}))
        return StepResult(observation=observation, reward=payload.get("reward"),
                          done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)


class _Episode:
    """One WebSocket session shaped like envhub's ``Session`` for ``_load.drive``."""

    def __init__(self, client: CalcClient) -> None:
        self._client = client

    async def step(self, tool_calls: list[dict[str, str]]) -> None:
        arguments = json.loads(tool_calls[0]["arguments"])
        result = await self._client.step(CalcAction(**arguments))
        if result.observation.error:
            raise RuntimeError(result.observation.error)

    async def close(self) -> None:
        await self._client.close()


def opener(url: str) -> Any:
    async def open_episode(task_id: str) -> _Episode:
        client = CalcClient(base_url=url, message_timeout_s=300.0, connect_timeout_s=300.0)
        try:
            await client.reset(episode_id=task_id)
        except BaseException:
            await client.close()
            raise
        return _Episode(client)
    return open_episode


def serve(port: int, max_sessions: int, threaded: bool) -> None:
    import uvicorn

    env = CalcEnvironment if threaded else AsyncCalcEnvironment
    app = create_app(env, CalcAction, CalcObservation, env_name="calc",
                     max_concurrent_envs=max_sessions)
    uvicorn.run(app, host="127.0.0.1", port=port, workers=1, log_level="warning")


async def measure(url: str, concurrency: int, steps: int, duration: float) -> None:
    cpu = time.process_time()
    run, elapsed = await drive(opener(url), concurrency, steps, duration)
    print(json.dumps({"run": dataclasses.asdict(run), "elapsed": elapsed,
                      "client_cpu": time.process_time() - cpu}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser("serve")
    server.add_argument("--port", type=int, required=True)
    server.add_argument("--max-sessions", type=int, required=True)
    server.add_argument("--threaded", action="store_true",
                        help="synchronous reset/step in a thread per session (OpenEnv's template)")
    driver = commands.add_parser("drive")
    driver.add_argument("--url", required=True)
    driver.add_argument("--concurrency", type=int, required=True)
    driver.add_argument("--steps", type=int, required=True)
    driver.add_argument("--duration", type=float, required=True)
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.port, args.max_sessions, args.threaded)
        return
    # Same loop as envhub's driver (uvloop when installed), so neither side gets a faster one.
    try:
        import uvloop
    except ImportError:
        asyncio.run(measure(args.url, args.concurrency, args.steps, args.duration))
    else:
        uvloop.run(measure(args.url, args.concurrency, args.steps, args.duration))


if __name__ == "__main__":
    sys.exit(main())
