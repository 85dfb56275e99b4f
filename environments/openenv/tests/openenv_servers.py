"""Two small OpenEnv environments written with OpenEnv's public API, served by OpenEnv.

Runs in the OpenEnv venv (``.ci/openenv_setup.sh``), never in envhub's: it imports only
OpenEnv and the standard library.

- ``guess``: an action-model environment. ``GuessAction(number, note)``; the seed of
  ``reset`` picks a secret number in 0..99, each step answers ``higher``/``lower``/
  ``correct`` and is scored by an OpenEnv rubric with two named children (``exact``
  and ``closeness``), whose scores the step reports in ``metadata["rubric"]``; the
  episode is done when the guess is right or after five guesses. A note of ``"raise"``
  makes the step raise (OpenEnv answers an ``EXECUTION_ERROR`` frame), ``"slow"`` makes
  it take 2 s.
- ``adder``: an MCP environment (FastMCP tools ``add``, ``submit``, ``fail``); ``reset``
  takes the two numbers to add (``a``, ``b``); ``submit`` ends the episode with reward 1
  when its answer is their sum, else 0.

    python openenv_servers.py guess --port 8123

Gradio is kept out: OpenEnv imports it only for its optional web interface (its
``env_server`` package falls back to none when ``import gradio`` fails), which these
servers do not serve, and importing it is most of a server's start (more than half).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

sys.modules["gradio"] = None  # type: ignore[assignment]  # import gradio: ModuleNotFoundError

import uvicorn  # noqa: E402
from fastmcp import FastMCP  # noqa: E402
from openenv.core.env_server import Environment, create_app  # noqa: E402
from openenv.core.env_server.mcp_environment import MCPEnvironment  # noqa: E402
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from openenv.core.rubrics import Rubric  # noqa: E402
from pydantic import Field  # noqa: E402


class GuessAction(Action):
    """Guess the secret number."""

    number: int = Field(ge=0, le=99, description="Your guess, 0 to 99")
    note: str = Field(default="", description="Anything you want to note")


class GuessObservation(Observation):
    hint: str = ""
    guesses: int = 0


class AdderObservation(Observation):
    question: str = ""


class Exact(Rubric):
    def __init__(self) -> None:
        super().__init__()
        self.target = 0

    def forward(self, action: Any, observation: Any) -> float:
        return 1.0 if action.number == self.target else 0.0


class Closeness(Rubric):
    def __init__(self) -> None:
        super().__init__()
        self.target = 0

    def forward(self, action: Any, observation: Any) -> float:
        return 1.0 - abs(action.number - self.target) / 100


class GuessRubric(Rubric):
    def __init__(self) -> None:
        super().__init__()
        self.exact = Exact()
        self.closeness = Closeness()

    def aim(self, target: int) -> None:
        self.exact.target = self.closeness.target = target

    def forward(self, action: Any, observation: Any) -> float:
        return 0.8 * self.exact(action, observation) + 0.2 * self.closeness(action, observation)


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True
    MAX_GUESSES = 5

    def __init__(self) -> None:
        super().__init__(rubric=GuessRubric())
        self._state = State()
        self.target = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> GuessObservation:
        self._reset_rubric()
        self._state = State(episode_id=episode_id)
        self.target = random.Random(seed).randrange(100)
        assert isinstance(self.rubric, GuessRubric)
        self.rubric.aim(self.target)
        return GuessObservation(hint="guess a number from 0 to 99")

    def step(self, action: GuessAction, timeout_s: float | None = None,
             **kwargs: Any) -> GuessObservation:
        if action.note == "raise":
            raise ValueError("the environment raised on purpose")
        if action.note == "slow":
            time.sleep(2.0)
        self._state.step_count += 1
        if action.number == self.target:
            hint = "correct"
        else:
            hint = "higher" if action.number < self.target else "lower"
        observation = GuessObservation(hint=hint, guesses=self._state.step_count)
        observation.reward = self._apply_rubric(action, observation)
        assert self.rubric is not None
        observation.metadata = {
            "rubric": {name: r.last_score for name, r in self.rubric.named_rubrics()}
        }
        observation.done = hint == "correct" or self._state.step_count >= self.MAX_GUESSES
        return observation

    @property
    def state(self) -> State:
        return self._state


class AdderEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("adder")

        @mcp.tool
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @mcp.tool
        def submit(answer: str) -> str:
            """Submit the sum; this ends the episode."""
            return f"submitted {answer}"

        @mcp.tool
        def fail(reason: str) -> str:
            """Always fails."""
            raise ValueError(f"failed on purpose: {reason}")

        super().__init__(mcp)
        self._state = State()
        self.expected = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              a: int = 0, b: int = 0, **kwargs: Any) -> Observation:
        self._state = State(episode_id=episode_id)
        self.expected = a + b
        return AdderObservation(question=f"What is {a} + {b}?")

    async def step_async(self, action: Action, timeout_s: float | None = None,
                         **kwargs: Any) -> Observation:
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        self._state.step_count += 1
        if isinstance(action, CallToolAction) and action.tool_name == "submit":
            observation.reward = float(action.arguments.get("answer") == str(self.expected))
            observation.done = True
        return observation

    def _step_impl(self, action: Action, timeout_s: float | None = None,
                   **kwargs: Any) -> Observation:
        raise ValueError(f"adder takes MCP tool calls only, not {type(action).__name__}")

    @property
    def state(self) -> State:
        return self._state


def app(kind: str, max_sessions: int) -> Any:
    if kind == "guess":
        return create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess",
                          max_concurrent_envs=max_sessions)
    return create_app(AdderEnvironment, CallToolAction, CallToolObservation, env_name="adder",
                      max_concurrent_envs=max_sessions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["guess", "adder"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--max-sessions", type=int, default=64)
    args = parser.parse_args()
    uvicorn.run(app(args.kind, args.max_sessions), host=args.host, port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
