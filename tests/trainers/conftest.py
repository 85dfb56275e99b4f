"""Shared fixtures: the SmolLM2 tokenizer, a tiny model that imitated gold calc episodes,
and a real ``envhub serve`` app on 127.0.0.1 for the remote-session paths."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import envhub

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TRAIN_TASKS = ["calc-0-00000", "calc-0-00001"]


@pytest.fixture(scope="session")
def calc() -> envhub.LocalEnvironment:
    return envhub.make("calc", num_tasks=30)


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("trl")
    from envhub.trainers.tiny import smollm2_tokenizer

    # the tiny model's matrices are far too small to gain from threads, and on a busy
    # machine OpenMP threads spin-wait: one thread is several times faster
    torch.set_num_threads(1)

    return smollm2_tokenizer()


@pytest.fixture(scope="session")
def trl_imitated_model(tokenizer: Any, calc: envhub.LocalEnvironment) -> Any:
    """A tiny model that imitated the gold episodes of TRAIN_TASKS under the prompt TRL
    renders (tool schemas in transformers' form)."""
    from envhub.trainers.tiny import gold_vocabulary, imitate_gold, tiny_llama
    from envhub.trainers.trl import environment_factory

    tools = environment_factory(calc).rendered_tools()
    vocabulary = gold_vocabulary(tokenizer, calc, TRAIN_TASKS, tools=tools)
    model = tiny_llama(tokenizer, vocabulary=vocabulary)
    losses = imitate_gold(model, tokenizer, calc, TRAIN_TASKS, tools=tools)
    assert losses[-1] < 0.1 * losses[0]
    return model


@pytest.fixture(scope="module")
def calc_server() -> Iterator[str]:
    pytest.importorskip("fastapi")
    from envhub.server import create_app
    from envhub.testing import serve_in_thread

    with serve_in_thread(create_app(["calc"])) as url:
        yield url
