""".ci/run ends in "the README's test command": the README and the Tests page show the
exact pytest line it runs, so a reader who copies it runs what CI runs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ci_test_command() -> str:
    lines = (ROOT / ".ci" / "run").read_text("utf-8").splitlines()
    (command,) = [line.strip() for line in lines if line.strip().startswith(".venv/bin/pytest")]
    return command


def test_readme_and_tests_page_show_the_command_ci_runs() -> None:
    command = ci_test_command()
    for page in ("README.md", "docs/tests.md"):
        shown = [line.split("#")[0].strip() for line in
                 (ROOT / page).read_text("utf-8").splitlines()]
        assert command in shown, f"{page} does not show .ci/run's test command {command!r}"
