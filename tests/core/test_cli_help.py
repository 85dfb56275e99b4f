"""``--help`` texts reach the reader as written: square brackets (``envhub-rl[ray]``) are not
taken for markup, and every option says what it does."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def _help(*command: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "envhub.cli", *command, "--help"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "200", "TERM": "xterm-256color"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _option_help(text: str, option: str) -> str:
    """The help text of ``option`` in ``text``: what follows its name and placeholder on its
    line, and the indented lines under it up to the next option."""
    match = re.search(rf"^ +(?:-\w, )?{re.escape(option)}\b[^\n]*?(?: {{2,}}(.*))?$"
                      rf"((?:\n {{20,}}\S.*)*)", text, re.MULTILINE)  # fmt: skip
    assert match, f"{option} is not listed"
    return " ".join(f"{match.group(1) or ''} {match.group(2)}".split())


def test_brackets_in_help_texts_are_shown_literally() -> None:
    text = " ".join(_help("rollout").split())
    assert "pip install 'envhub-rl[ray]'" in text


def test_the_sampling_key_and_export_options_say_what_they_do() -> None:
    rollout = _help("rollout")
    assert "temperature" in _option_help(rollout, "--temperature")
    assert "top_p" in _option_help(rollout, "--top-p")
    assert "Authorization" in _option_help(rollout, "--api-key")
    assert "[env var: OPENAI_API_KEY]" in _option_help(rollout, "--api-key")
    assert ".parquet" in _option_help(_help("export"), "--output")
