"""The ``miniwob`` environment: MiniWoB++ task pages from the ``miniwob`` wheel, in Chromium.

The pages are served by the process's MiniShop server under ``/miniwob/``. An episode
loads a task page, seeds its random generator (``Math.seedrandom``) and starts it
(``core.startEpisodeReal``), exactly as the ``miniwob`` package's Selenium driver
does, so a (task, seed) pair always shows the same problem and element ids. The
reward is read from the page: MiniWoB's raw reward is in [-1, 1] and its time-
penalised reward decays over ``core.EPISODE_MAX_TIME``; we score ``float(raw > 0)``
like BrowserGym and record both. The first finished episode on the page is latched,
since MiniWoB shows a new problem once one ends.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from envhub import Budgets, Reward, Task, TaskSet
from envhub.errors import EnvironmentFailure, InvalidRequest, NotDeterministic
from envhub.types import Message
from envhub_web.server import get_site, miniwob_html_dir
from envhub_web.tab import NAV_TIMEOUT_S
from envhub_web.tools import BrowsingEnv

__all__ = ["MINIWOB_SYSTEM_PROMPT", "MiniWobEnv", "miniwob_task_url"]

MINIWOB_SYSTEM_PROMPT = (
    "You solve small web tasks in a browser. Each observation is the page as text: "
    'elements are written [bid] role "name" or [bid] text. Act with the tools using '
    "those bids, and call finish when the task is done."
)

_START_JS = """([seed, maxTimeMs]) => {
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = maxTimeMs;
  core.startEpisodeReal();
  return WOB_TASK_READY;
}"""
_READY_JS = "() => WOB_TASK_READY"
#: the episode's state; a page the model navigated to (another page of the site) has none
_STATE_JS = """() => typeof WOB_DONE_GLOBAL === "undefined" ? [false, 0, 0, null]
  : [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_GLOBAL, WOB_REWARD_REASON]"""


def miniwob_task_url(base_url: str, task: str) -> str:
    return f"{base_url}/miniwob/miniwob/{task}.html"


class MiniWobEnv(BrowsingEnv):
    """MiniWoB++ tasks with scripted gold actions (see ``envhub_web.miniwob_gold``)."""

    name = "miniwob"
    version = "0.1.0"
    budgets: ClassVar[Budgets] = BrowsingEnv.budgets.merged(max_turns=12)
    needs_browser = True
    tag_all_elements = True

    def __init__(
        self,
        mode: str | None = "browser",
        nav_timeout_s: float = NAV_TIMEOUT_S,
        chromium_path: str | None = None,
        screenshot_dir: str | None = None,
        fresh_browser: bool = False,
        tasks_file: str | None = None,
    ) -> None:
        super().__init__(
            mode=mode,
            nav_timeout_s=nav_timeout_s,
            chromium_path=chromium_path,
            screenshot_dir=screenshot_dir,
            fresh_browser=fresh_browser,
        )
        if miniwob_html_dir() is None:
            raise InvalidRequest("miniwob needs its wheel: pip install 'envhub-rl-web[miniwob]'")
        self.tasks_file = tasks_file
        self.outcome: tuple[float, float, str | None] | None = None

    def load_tasks(self) -> TaskSet:
        if self.tasks_file:
            return TaskSet.from_jsonl(self.tasks_file)
        return TaskSet.from_package("envhub_web", "miniwob_tasks.jsonl")

    async def start_page(self, task_name: str, seed: int) -> str:
        """Open and start one seeded MiniWoB page; returns its first observation."""
        site = await get_site()
        self.tab = await self.open_tab({}, site.base_url)
        await self.tab.goto(miniwob_task_url(site.base_url, task_name))
        max_time_ms = int(self.budgets.episode_timeout_s * 1000)
        ready = await self.tab.evaluate(_START_JS, [seed, max_time_ms])  # type: ignore[attr-defined]
        for _ in range(100):
            if ready:
                break
            await asyncio.sleep(0.05)
            ready = await self.tab.evaluate(_READY_JS)  # type: ignore[attr-defined]
        else:
            raise EnvironmentFailure(f"MiniWoB task {task_name} did not become ready")
        return await self.observe()

    async def reset(self, task: Task) -> list[Message]:
        messages = await super().reset(task)
        page = await self.start_page(task.metadata["task"], int(task.metadata["seed"]))
        messages[-1]["content"] = f"{messages[-1]['content']}\n\nCurrent page:\n{page}"
        return messages

    async def observe(self) -> str:
        text = await super().observe()
        if self.outcome is None:
            done, raw, reward, reason = await self.tab.evaluate(_STATE_JS)  # type: ignore[union-attr]
            if done:
                self.outcome = (float(raw), float(reward), reason)
        if self.outcome is not None:
            text += f"\n\nThe task has ended (MiniWoB raw reward {self.outcome[0]:g}); call finish."
        return text

    async def snapshot(self) -> object | None:
        """Refused: MiniWoB's pages show a reward that decays with the seconds the episode
        took (and some tasks a countdown), so no replay reproduces what the model saw,
        and a browser page's state cannot be copied."""
        raise NotDeterministic(
            "miniwob cannot fork: its pages depend on the wall clock (the reward shown "
            "decays with time), so a replay cannot reproduce the episode"
        )

    def reward(self) -> Reward:
        if self.outcome is None:
            return Reward(value=0.0, components={"raw": 0.0, "time_penalised": 0.0, "done": 0.0})
        raw, penalised, reason = self.outcome
        return Reward(
            value=float(raw > 0),
            components={"raw": raw, "time_penalised": penalised, "done": 1.0},
            info={"reason": reason, "answer": self.answer},
        )
