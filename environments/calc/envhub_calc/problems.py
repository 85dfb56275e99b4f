"""Seeded arithmetic word problems in three difficulty levels, each with a gold solution.

Every task is generated from ``(seed, index)`` alone, so ids and contents are stable
across machines and releases; the split is a fixed function of the index.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from envhub import GoldCall, Task
from envhub_calc.calculator import evaluate

__all__ = ["LEVELS", "SYSTEM_PROMPT", "generate_tasks"]

SYSTEM_PROMPT = (
    "You solve arithmetic word problems. Use the `calculate` tool for arithmetic, "
    "then call `answer` with the final number."
)

ITEMS = ["apples", "books", "marbles", "pencils", "stickers", "tickets", "cookies", "stamps"]
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun"]


@dataclass(frozen=True)
class Problem:
    question: str
    expression: str


def _easy(rng: random.Random) -> Problem:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(10, 999), rng.randint(10, 999)
    if rng.random() < 0.5:
        return Problem(
            f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?",
            f"{a} + {b}",
        )
    a, b = max(a, b), min(a, b)
    return Problem(
        f"{name} had {a} {item} and gave away {b}. How many {item} are left?", f"{a} - {b}"
    )


def _medium(rng: random.Random) -> Problem:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    boxes, per_box = rng.randint(3, 40), rng.randint(6, 48)
    extra = rng.randint(1, boxes * per_box - 1)
    if rng.random() < 0.5:
        return Problem(
            f"{name} buys {boxes} boxes with {per_box} {item} each and then gives {extra} {item} "
            f"to a friend. How many {item} does {name} keep?",
            f"{boxes} * {per_box} - {extra}",
        )
    return Problem(
        f"A class has {boxes} tables. Each table gets {per_box} {item}, and the teacher keeps "
        f"{extra} spare {item}. How many {item} are there in total?",
        f"{boxes} * {per_box} + {extra}",
    )


def _hard(rng: random.Random) -> Problem:
    friends = rng.randint(2, 8)
    bill = round(rng.uniform(20, 400), 2)
    tip = rng.choice([10, 12, 15, 18, 20])
    fee = round(rng.uniform(0.5, 5), 2)
    if rng.random() < 0.5:
        return Problem(
            f"A dinner bill is ${bill:.2f}. The group adds a {tip}% tip, then splits the total "
            f"evenly among {friends} friends, and each pays a ${fee:.2f} booking fee on top. "
            f"How many dollars does each friend pay? Round to 2 decimals.",
            f"(({bill} * (1 + {tip} / 100)) / {friends}) + {fee}",
        )
    hours, rate, weeks = rng.randint(5, 40), round(rng.uniform(9, 60), 2), rng.randint(2, 12)
    tax = rng.choice([5, 10, 15, 20, 25])
    return Problem(
        f"Someone works {hours} hours a week at ${rate:.2f} per hour for {weeks} weeks, and "
        f"{tax}% of the pay goes to tax. How many dollars are left after tax? Round to 2 decimals.",
        f"{hours} * {rate} * {weeks} * (1 - {tax} / 100)",
    )


LEVELS: dict[str, Callable[[random.Random], Problem]] = {
    "easy": _easy,
    "medium": _medium,
    "hard": _hard,
}


def _format(value: float) -> str:
    rounded = round(value, 2)
    return str(int(rounded)) if float(rounded).is_integer() else f"{rounded:.2f}"


def generate_tasks(count: int = 3000, seed: int = 0, test_fraction: float = 0.2) -> list[Task]:
    """``count`` tasks cycling through the levels; every fifth index (by default) is test."""
    levels = list(LEVELS)
    tasks = []
    stride = max(1, round(1 / test_fraction)) if test_fraction > 0 else 0
    for index in range(count):
        level = levels[index % len(levels)]
        problem = LEVELS[level](random.Random(f"{seed}:{index}"))
        answer = _format(evaluate(problem.expression))
        tasks.append(
            Task(
                id=f"calc-{seed}-{index:05d}",
                prompt=[
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": problem.question},
                ],
                answer=answer,
                gold_actions=[
                    GoldCall(name="calculate", arguments={"expression": problem.expression}),
                    GoldCall(name="answer", arguments={"value": answer}),
                ],
                split="test" if stride and index % stride == stride - 1 else "train",
                metadata={"level": level},
            )
        )
    return tasks
