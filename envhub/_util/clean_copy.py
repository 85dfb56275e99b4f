"""A copy of a source tree without what a build or a checkout leaves behind.

Building a distribution from a copy keeps the user's tree untouched, and leaving out
``build/``, ``*.egg-info`` and caches keeps stale files of an earlier (editable) build out
of the new wheel. ``envhub image build`` and ``envhub publish`` both build from one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["LEFT_OUT", "clean_copy"]

LEFT_OUT = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "build", "dist", "*.egg-info", ".git", ".venv", "tests", ".*cache"
)
"""What a clean copy leaves out (a ``shutil.copytree`` ignore function); tests too: a
wheel never ships them."""


def clean_copy(source: Path, dest: Path) -> Path:
    """``source`` copied to ``dest`` (which must not exist) without :data:`LEFT_OUT`;
    returns ``dest``."""
    shutil.copytree(source, dest, ignore=LEFT_OUT, symlinks=False)
    return dest
