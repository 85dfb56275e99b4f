"""Scripted solvers that write the MiniWoB++ task file (``miniwob_tasks.jsonl``).

Gold actions are static tool calls, but a MiniWoB problem exists only once its page
has run with a seed. So this script opens each (task, seed) in the real environment,
lets a per-task solver read the live DOM and choose tool calls one at a time (the
same calls, on the same numbered bids, that a replay will make), and keeps the pair
only if the page then reports a positive reward. Task types without a solver here
are unsupported. Regenerate (needs Chromium and ``miniwob``) with::

    cd environments/web
    python -m envhub_web.miniwob_gold --seeds 10 --out envhub_web/miniwob_tasks.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from envhub import GoldCall, Task
from envhub_web.miniwob_env import MINIWOB_SYSTEM_PROMPT, MiniWobEnv

__all__ = ["SOLVERS", "generate_miniwob_tasks"]

_DOM_JS = """() => Array.from(document.querySelectorAll('[data-bid]')).map((el) => {
  const norm = (s) => (s || '').replace(/\\s+/g, ' ').trim();
  const box = el.getBoundingClientRect();
  const style = getComputedStyle(el);
  const label = el.closest('label');
  return {
    bid: el.getAttribute('data-bid'), tag: el.tagName.toLowerCase(),
    type: (el.getAttribute('type') || '').toLowerCase(), text: norm(el.textContent),
    cls: typeof el.className === 'string' ? el.className : '', id: el.id,
    dtype: el.getAttribute('data-type') || '', label: label ? norm(label.textContent) : '',
    visible: box.width > 0 && box.height > 0 && style.visibility !== 'hidden',
  };
})"""


@dataclass
class Ctx:
    """What a solver sees: the instruction and the live DOM, refreshed after each action."""

    utterance: str
    dom: list[dict[str, Any]] = field(default_factory=list)

    def find(self, **match: Any) -> list[dict[str, Any]]:
        visible_only = match.pop("visible", True)
        return [
            el
            for el in self.dom
            if (el["visible"] or not visible_only) and all(el.get(k) == v for k, v in match.items())
        ]

    def one(self, **match: Any) -> str:
        found = self.find(**match)
        if not found:
            raise LookupError(f"no element {match}")
        return found[0]["bid"]

    def quoted(self, index: int = 0) -> str:
        return re.findall(r'"([^"]*)"', self.utterance)[index]


Solver = Callable[[Ctx], Iterator[GoldCall]]


def click(bid: str) -> GoldCall:
    return GoldCall(name="click", arguments={"bid": bid})


def fill(bid: str, text: str) -> GoldCall:
    return GoldCall(name="fill", arguments={"bid": bid, "text": text})


def _submit(ctx: Ctx) -> GoldCall:
    return click(
        next(
            el["bid"] for el in ctx.find(tag="button") if el["text"].lower() in ("submit", "login")
        )
    )


def _textboxes(ctx: Ctx) -> list[str]:
    return [
        el["bid"]
        for el in ctx.dom
        if el["visible"]
        and (
            el["tag"] == "textarea"
            or (
                el["tag"] == "input"
                and el["type"] in ("", "text", "input", "password", "date", "time")
            )
        )
    ]


def click_quoted_button(ctx: Ctx) -> Iterator[GoldCall]:
    yield click(ctx.one(tag="button", text=ctx.quoted()))


def click_button_sequence(ctx: Ctx) -> Iterator[GoldCall]:
    yield click(ctx.one(tag="button", text="ONE"))
    yield click(ctx.one(tag="button", text="TWO"))


def click_link(ctx: Ctx) -> Iterator[GoldCall]:
    yield click(ctx.one(tag="span", cls="alink", text=ctx.quoted()))


def click_option(ctx: Ctx) -> Iterator[GoldCall]:
    wanted = re.match(r"Select (.*) and click Submit\.", ctx.utterance).group(1)  # type: ignore[union-attr]
    yield click(ctx.one(tag="input", type="radio", label=wanted))
    yield _submit(ctx)


def click_checkboxes(ctx: Ctx) -> Iterator[GoldCall]:
    wanted = re.match(r"Select (.*) and click Submit\.", ctx.utterance).group(1)  # type: ignore[union-attr]
    if wanted != "nothing":
        for word in (w.strip() for w in wanted.split(",")):
            yield click(ctx.one(tag="input", type="checkbox", label=word))
    yield _submit(ctx)


def click_dialog(ctx: Ctx) -> Iterator[GoldCall]:
    yield click(ctx.one(tag="button", text="Close"))


def click_dialog_2(ctx: Ctx) -> Iterator[GoldCall]:
    label = ctx.quoted()
    yield click(ctx.one(tag="button", text="Close" if label == "x" else label))


def click_test(ctx: Ctx) -> Iterator[GoldCall]:
    yield click(ctx.one(tag="button"))


def click_test_2(ctx: Ctx) -> Iterator[GoldCall]:
    yield click(ctx.one(tag="button", text=ctx.utterance.split()[-1].rstrip(".")))


def click_widget(ctx: Ctx) -> Iterator[GoldCall]:
    yield click(ctx.one(dtype=ctx.quoted()))


def enter_quoted_text(ctx: Ctx) -> Iterator[GoldCall]:
    yield fill(_textboxes(ctx)[0], ctx.quoted())
    yield _submit(ctx)


def enter_text_2(ctx: Ctx) -> Iterator[GoldCall]:
    text = ctx.quoted()
    text = text.upper() if "upper case" in ctx.utterance else text.lower()
    yield fill(_textboxes(ctx)[0], text)
    yield _submit(ctx)


def enter_password(ctx: Ctx) -> Iterator[GoldCall]:
    for bid in _textboxes(ctx)[:2]:
        yield fill(bid, ctx.quoted())
    yield _submit(ctx)


def login_user(ctx: Ctx) -> Iterator[GoldCall]:
    user, password = _textboxes(ctx)[:2]
    yield fill(user, ctx.quoted(0))
    yield fill(password, ctx.quoted(1))
    yield _submit(ctx)


def focus_text(ctx: Ctx) -> Iterator[GoldCall]:
    yield click(_textboxes(ctx)[0])


def focus_text_2(ctx: Ctx) -> Iterator[GoldCall]:
    nth = int(re.search(r"(\d+)(st|nd|rd|th)", ctx.utterance).group(1))  # type: ignore[union-attr]
    yield click(_textboxes(ctx)[nth - 1])


def choose_list(ctx: Ctx) -> Iterator[GoldCall]:
    wanted = re.match(r"Select (.*) from the list and click Submit\.", ctx.utterance).group(1)  # type: ignore[union-attr]
    yield GoldCall(name="select_option", arguments={"bid": ctx.one(tag="select"), "value": wanted})
    yield _submit(ctx)


def click_tab(ctx: Ctx) -> Iterator[GoldCall]:
    number = re.search(r"Tab #(\d+)", ctx.utterance).group(1)  # type: ignore[union-attr]
    yield click(ctx.one(tag="a", text=f"Tab #{number}"))


def _reveal_and_click(ctx: Ctx, headers: list[str]) -> Iterator[GoldCall]:
    """Open each tab/section in turn until the quoted link is visible, then click it."""
    target = ctx.quoted()
    for header in [None, *headers]:
        if header is not None:
            yield click(header)
        found = ctx.find(cls="alink", text=target)
        if found:
            yield click(found[0]["bid"])
            return
    raise LookupError(f"link {target!r} not found")


def click_tab_2(ctx: Ctx) -> Iterator[GoldCall]:
    yield from _reveal_and_click(
        ctx, [el["bid"] for el in ctx.find(tag="a") if el["text"].startswith("Tab #")]
    )


def click_collapsible(ctx: Ctx) -> Iterator[GoldCall]:
    yield click(ctx.find(tag="h3")[0]["bid"])
    yield _submit(ctx)


def click_collapsible_2(ctx: Ctx) -> Iterator[GoldCall]:
    yield from _reveal_and_click(ctx, [el["bid"] for el in ctx.find(tag="h3")])


def enter_date(ctx: Ctx) -> Iterator[GoldCall]:
    month, day, year = re.search(r"(\d\d)/(\d\d)/(\d{4})", ctx.utterance).groups()  # type: ignore[union-attr]
    yield fill(ctx.one(tag="input", type="date"), f"{year}-{month}-{day}")
    yield _submit(ctx)


def enter_time(ctx: Ctx) -> Iterator[GoldCall]:
    hour, minute, half = re.search(r"(\d+):(\d\d) ([AP]M)", ctx.utterance).groups()  # type: ignore[union-attr]
    hours = int(hour) % 12 + (12 if half == "PM" else 0)
    yield fill(ctx.one(tag="input", type="time"), f"{hours:02d}:{minute}")
    yield _submit(ctx)


def _area_text(ctx: Ctx) -> str:
    return next(el["text"] for el in ctx.dom if el["id"] == "area")


def simple_arithmetic(ctx: Ctx) -> Iterator[GoldCall]:
    a, op, b = re.search(r"(-?\d+) ([-+x*]) (-?\d+) =", _area_text(ctx)).groups()  # type: ignore[union-attr]
    value = {"+": int(a) + int(b), "-": int(a) - int(b)}.get(op, int(a) * int(b))
    yield fill(_textboxes(ctx)[0], str(value))
    yield _submit(ctx)


def simple_algebra(ctx: Ctx) -> Iterator[GoldCall]:
    match = re.search(r"(-?\d+) ([-+]) x = (-?\d+)|x ([-+]) (-?\d+) = (-?\d+)", _area_text(ctx))
    assert match is not None
    if match.group(1) is not None:
        a, op, c = int(match.group(1)), match.group(2), int(match.group(3))
        value = c - a if op == "+" else a - c
    else:
        op, b, c = match.group(4), int(match.group(5)), int(match.group(6))
        value = c - b if op == "+" else c + b
    yield fill(_textboxes(ctx)[0], str(value))
    yield _submit(ctx)


def find_word(ctx: Ctx) -> Iterator[GoldCall]:
    nth = int(re.search(r"(\d+)(st|nd|rd|th) word", ctx.utterance).group(1))  # type: ignore[union-attr]
    paragraph = next(el["text"] for el in ctx.dom if el["tag"] == "p")
    word = re.sub(r"[^a-zA-Z0-9]", "", paragraph.split()[nth - 1])
    yield fill(_textboxes(ctx)[0], word)
    yield _submit(ctx)


SOLVERS: dict[str, Solver] = {
    "click-button": click_quoted_button,
    "unicode-test": click_quoted_button,
    "click-button-sequence": click_button_sequence,
    "click-link": click_link,
    "click-option": click_option,
    "click-checkboxes": click_checkboxes,
    "click-dialog": click_dialog,
    "click-dialog-2": click_dialog_2,
    "click-test": click_test,
    "click-test-2": click_test_2,
    "click-widget": click_widget,
    "enter-text": enter_quoted_text,
    "enter-text-dynamic": enter_quoted_text,
    "enter-text-2": enter_text_2,
    "enter-password": enter_password,
    "login-user": login_user,
    "focus-text": focus_text,
    "focus-text-2": focus_text_2,
    "choose-list": choose_list,
    "click-tab": click_tab,
    "click-tab-2": click_tab_2,
    "click-collapsible": click_collapsible,
    "click-collapsible-2": click_collapsible_2,
    "enter-date": enter_date,
    "enter-time": enter_time,
    "simple-arithmetic": simple_arithmetic,
    "simple-algebra": simple_algebra,
    "find-word": find_word,
}


async def _solve(task_name: str, seed: int) -> tuple[str, list[GoldCall]] | str:
    """Gold actions and utterance for one seeded page, or why it failed."""
    env = MiniWobEnv()
    try:
        await env.start_page(task_name, seed)
        tab: Any = env.tab
        ctx = Ctx(await tab.evaluate("() => core.getUtterance()"))
        ctx.dom = await tab.evaluate(_DOM_JS)
        actions: list[GoldCall] = []
        for call in SOLVERS[task_name](ctx):
            actions.append(call)
            await getattr(env, call.name)(**call.arguments)
            ctx.dom = await tab.evaluate(_DOM_JS)
        await env.observe()
        if env.outcome is None or env.outcome[0] <= 0:
            return f"reward {env.outcome}"
        return ctx.utterance, [*actions, GoldCall(name="finish", arguments={"answer": ""})]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        await env.close()


async def generate_miniwob_tasks(
    seeds: int, test_every: int = 5
) -> tuple[list[Task], dict[str, str]]:
    """Tasks for ``seeds`` seeds of every solvable task type, and the failures seen."""
    tasks: list[Task] = []
    failures: dict[str, str] = {}
    for task_name in SOLVERS:
        for seed in range(seeds):
            result = await _solve(task_name, seed)
            if isinstance(result, str):
                failures[f"{task_name}/{seed}"] = result
                continue
            utterance, gold = result
            tasks.append(
                Task(
                    id=f"miniwob.{task_name}.{seed}",
                    prompt=[
                        {"role": "system", "content": MINIWOB_SYSTEM_PROMPT},
                        {"role": "user", "content": f"Instruction: {utterance}"},
                    ],
                    gold_actions=gold,
                    split="test" if seed % test_every == test_every - 1 else "train",
                    metadata={"task": task_name, "seed": seed, "utterance": utterance},
                )
            )
    return tasks, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from envhub_web.runtime import shutdown

    try:
        tasks, failures = asyncio.run(generate_miniwob_tasks(args.seeds))
    finally:
        shutdown()
    with open(args.out, "w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task.model_dump(mode="json"), ensure_ascii=False) + "\n")
    for key, why in failures.items():
        print(f"skipped {key}: {why}", file=sys.stderr)
    print(
        f"wrote {len(tasks)} tasks of {len({t.metadata['task'] for t in tasks})} types"
        f" to {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
