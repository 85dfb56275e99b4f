"""The shared hostile-answer corpus (:mod:`envhub.testing.hostile`) against web and miniwob: each
text is what the model types and asks for (a search query the site tokenizes and renders,
a URL, a key, an option) and then its final answer, in an episode that goes on to do the
task. Every episode is scored as the same episode with a plain wrong answer is, nothing
runs on the host, and the episodes scored afterwards get a clean run's rewards.

test_hostile_actions.py covers what a tab may reach (other origins, schemes, malformed
URLs); here the text only has to leave the site, the session store and the score intact.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import envhub
from envhub.task import GoldCall
from envhub.testing import check_hostile_answers
from envhub.testing.hostile import HOSTILE_ANSWERS

SHOP_TASK = "minishop-0-00004"
#: MiniWoB's enter-text: type the name shown into [6], submit with [7]
ENTER_TEXT_TASK = "miniwob.enter-text.0"


def _call(name: str, **arguments: str) -> GoldCall:
    return GoldCall(name=name, arguments=arguments)


def _shop_calls(gold: list[GoldCall]) -> Callable[[str], list[GoldCall]]:
    purchase = [call for call in gold if call.name != "finish"]  # search, open, options, buy

    def calls(text: str) -> list[GoldCall]:
        """``text`` searched for, pressed as a key, opened as a URL and chosen as an option,
        around the task's purchase, and then the answer: the purchase scores 1.0 whatever
        the text, as long as the text leaves the site and the episode's cart alone."""
        return [
            _call("fill", bid="search-input", text=text),
            _call("click", bid="search-button"),
            _call("press", bid="search-input", key=text),
            _call("goto", url=text),
            _call("goto", url="/"),
            *purchase[:3],
            _call("select_option", bid="opt-size", value=text),
            *purchase[3:],
            _call("finish", answer=text),
        ]

    return calls


#: what browser mode adds to text mode is Chromium typing, pressing and navigating the
#: text, so it takes the corpus's texts that differ there (empty, not printable, long, quotes,
#: shell and JSON syntax) and leaves the code injections, which reach the same site and
#: score as in text mode, where the whole corpus runs (an episode costs seconds here)
BROWSER_SUBSET = [
    raw
    for raw in HOSTILE_ANSWERS
    if not raw
    or not raw.isprintable()
    or len(raw) > 200
    or raw.startswith(("$(", "`", "'", "{", "1"))
]


@pytest.mark.parametrize("mode", ["text", pytest.param("browser", marks=pytest.mark.chromium)])
async def test_hostile_text_in_a_shop_episode_scores_as_a_plain_wrong_answer(mode: str) -> None:
    env = envhub.make("web", mode=mode)
    task = await env.task(SHOP_TASK)
    await check_hostile_answers(
        env,
        SHOP_TASK,
        _shop_calls(task.gold_actions),
        plain_wrong="0",
        answers=BROWSER_SUBSET if mode == "browser" else None,
        concurrency=4,  # a browser mostly waits: four episodes in flight, less wall time
    )


def _enter_text_calls(text: str) -> list[GoldCall]:
    """``text`` typed and submitted (MiniWoB's page scores it), opened as a URL once the
    outcome is latched, and answered."""
    return [
        _call("fill", bid="6", text=text),
        _call("click", bid="7"),
        _call("goto", url=text),
        _call("finish", answer=text),
    ]


@pytest.mark.chromium
async def test_hostile_text_typed_into_a_miniwob_page_scores_as_a_plain_wrong_answer() -> None:
    """The browser subset too: the page's own script compares the typed text as a string,
    so the code injections are one more wrong string to it, while what Chromium types,
    presses and navigates differently is what the subset keeps."""
    env = envhub.make("miniwob")
    await check_hostile_answers(env, ENTER_TEXT_TASK, _enter_text_calls, plain_wrong="0",
                                answers=BROWSER_SUBSET, concurrency=4)  # fmt: skip
