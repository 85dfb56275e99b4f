"""Loading a model's ``transformers`` tokenizer from a local directory or a GGUF file.

Token-in/token-out rollouts (:mod:`envhub.policies.tito`) and the CPU trainer demos
(:mod:`envhub.trainers.tiny`) render chat templates and tokenise on the client, so they
need the served model's tokenizer without a model hub. ``transformers`` reads a GGUF
file's tokenizer (through the ``gguf`` package), but parsing it takes 10-30 s of CPU;
the converted tokenizer is therefore saved once per machine under the cache directory
(:func:`envhub.runtime.cache.cache_root`: ``$ENVHUB_CACHE`` or ``~/.cache/envhub``), keyed by
the file's name, size and mtime, and later loads take well under a second. Concurrent
first uses convert it once (:func:`envhub.runtime.cache.build_once`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from envhub.errors import InvalidRequest
from envhub.runtime.cache import build_once, cache_root

__all__ = ["gguf_tokenizer_dir", "load_tokenizer"]


def gguf_tokenizer_dir(gguf: Path) -> Path:
    """Where the tokenizer converted from ``gguf`` is kept."""
    stat = gguf.stat()
    return cache_root() / f"{gguf.stem}-tokenizer-{stat.st_size}-{int(stat.st_mtime)}"


def load_tokenizer(
    path: str | os.PathLike[str],
    *,
    chat_template: str | os.PathLike[str] | None = None,
) -> Any:
    """The tokenizer in directory ``path`` or GGUF file ``path`` (converted once, see the
    module docstring); ``chat_template`` is a Jinja file that replaces the tokenizer's
    own template (e.g. one that renders tools where the model's does not)."""
    from transformers import AutoTokenizer

    source = Path(path).expanduser()
    if source.is_file() and source.suffix == ".gguf":

        def convert(tmp: Path) -> None:
            gguf = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
            gguf.save_pretrained(str(tmp))

        source = build_once(gguf_tokenizer_dir(source), convert)
    elif not source.is_dir():
        raise InvalidRequest(f"no tokenizer at {path}: give a model directory or a .gguf file")
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    if chat_template is not None:
        template = Path(chat_template).expanduser()
        if not template.is_file():
            raise InvalidRequest(f"the chat template {chat_template} is not a file")
        tokenizer.chat_template = template.read_text()
    return tokenizer
