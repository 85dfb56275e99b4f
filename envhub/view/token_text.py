"""Token ids to text for the token view: a transformers tokenizer (a local folder or a
GGUF file, loaded by :func:`envhub.tokens.tokenizers.load_tokenizer`) when the user gives one
with ``--tokenizer``, else the ids themselves.

Loading is explicit and up front (:func:`load_decoder`), so a bad path is a CLI error,
not a broken page; transformers is imported only then.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.errors import EnvhubError, InvalidRequest

__all__ = ["Decoder", "TokenCell", "decode_ids", "load_decoder", "token_cells"]

Decoder = Callable[[Sequence[int]], list[str]]
"""Turns token ids into one display string per id."""


def decode_ids(ids: Sequence[int]) -> list[str]:
    """The decoder without a tokenizer: each id as its number."""
    return [str(i) for i in ids]


def load_decoder(path: str | Path) -> Decoder:
    """A decoder from a tokenizer folder (``tokenizer.json`` & co) or a ``.gguf`` file."""
    path = Path(path)
    if not path.exists():
        raise InvalidRequest(f"--tokenizer {path}: no such file or folder", code="not_found")
    from envhub.tokens.tokenizers import load_tokenizer

    try:
        tokenizer: Any = load_tokenizer(path)
    except ImportError as exc:
        raise InvalidRequest(
            "--tokenizer needs transformers: pip install 'envhub-rl[train]'", code="missing_extra"
        ) from exc
    except EnvhubError:
        raise
    except Exception as exc:  # transformers raises many kinds for an unreadable tokenizer
        raise InvalidRequest(
            f"--tokenizer {path}: cannot load a tokenizer: {type(exc).__name__}: {exc}",
            code="bad_tokenizer",
        ) from exc

    vocabulary = len(tokenizer)

    def decode(ids: Sequence[int]) -> list[str]:
        """Each id's text; an id the tokenizer does not have (a line's ids are whatever
        its writer recorded) is shown as ``<id>``, not passed to the tokenizer to fail."""
        return [str(tokenizer.decode([i])) if 0 <= i < vocabulary else f"<{i}>" for i in ids]

    return decode


@dataclass(frozen=True)
class TokenCell:
    """One sampled token: its text, id, logprob and a background colour for its probability."""

    text: str
    token_id: int
    logprob: float

    @property
    def probability(self) -> float:
        """``exp(logprob)``; a logprob above 0 (a server's bug: no probability) is taken as
        0, so a huge one cannot overflow."""
        return math.exp(min(self.logprob, 0.0))

    @property
    def colour(self) -> str:
        """Red for unlikely, green for likely (hue 0 to 120)."""
        return f"hsl({120 * min(max(self.probability, 0.0), 1.0):.0f}, 70%, 82%)"

    @property
    def title(self) -> str:
        return f"p={self.probability:.3f} logprob={self.logprob:.3f} id={self.token_id}"


def token_cells(
    ids: Sequence[int] | None, logprobs: Sequence[float] | None, decoder: Decoder
) -> list[TokenCell]:
    """The cells of one turn's completion, or none when ids or logprobs are missing."""
    if not ids or not logprobs or len(ids) != len(logprobs):
        return []
    return [
        TokenCell(text, token_id, logprob)
        for text, token_id, logprob in zip(decoder(ids), ids, logprobs, strict=True)
    ]
