"""The calc starter: safe calculator, deterministic tasks, rewards, contract check."""

import pytest
from envhub_calc import CalculatorError, evaluate, generate_tasks

import envhub
from envhub.testing import check_environment


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-3 ** 2", -9),
        ("2 ** 10", 1024),
        ("10 % 4", 2),
        ("1.5e2", 150.0),
    ],
)
def test_calculator(expression: str, value: float) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('id')", "unsupported syntax"),
        ("2 ** 1000", "exponent"),
        ("9" * 20 + " * " + "9" * 20, "out of range"),
        ("1 / 0", "division by zero"),
        ("1 +", "not an arithmetic"),
        ("1" * 201, "longer than"),
        ("(10 ** 10) ** 10", "out of range"),
        ("True + 1", "unsupported"),
        ("'a' * 3", "unsupported"),
    ],
)
def test_calculator_rejects(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=message):
        evaluate(expression)


def test_tasks_are_deterministic_and_split() -> None:
    first, again = generate_tasks(300, seed=5), generate_tasks(300, seed=5)
    assert [t.model_dump() for t in first] == [t.model_dump() for t in again]
    assert generate_tasks(3, seed=6)[0].prompt != first[0].prompt
    levels = {t.metadata["level"] for t in first}
    assert levels == {"easy", "medium", "hard"}
    assert sum(t.split == "test" for t in first) == 60


def test_every_task_passes_the_contract_check() -> None:
    report = check_environment("calc", concurrency=64)
    assert report.checked == 3000


async def test_wrong_and_malformed_answers() -> None:
    env = envhub.make("calc")
    task = env.tasks.get("calc-0-00002")
    session = await env.open(task.id)
    bad = await session.step(
        [{"id": "1", "name": "calculate", "arguments": '{"expression": "import os"}'}]
    )
    assert bad.observations[0].is_error and "CalculatorError" in bad.observations[0].content
    done = await session.step([{"id": "2", "name": "answer", "arguments": {"value": "-1"}}])
    assert done.done and done.reward == 0.0
    closed = await session.close()
    assert closed.components == {"correct": 0.0, "answered": 1.0}


async def test_numeric_answer_formats_are_accepted() -> None:
    env = envhub.make("calc", num_tasks=30)
    task = next(t for t in env.tasks if "." in t.answer)
    session = await env.open(task.id)
    padded = task.answer + "0"  # "3.5" vs "3.50" style differences still match
    result = await session.step(
        [{"id": "1", "name": "answer", "arguments": {"value": float(padded)}}]
    )
    assert result.reward == 1.0
