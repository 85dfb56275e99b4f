"""Prompt token ids for token-in/token-out episodes, from a Hugging Face chat template.

The first prompt of an episode is the template's rendering of the opening messages and
tools (with the generation prompt). Every later prompt is the previous prompt, the exact
ids the model sampled, and the ids of what came after: never a re-rendering of earlier
turns, so the sequence the model saw is the sequence the trainer gets.

What comes after the sampled ids is computed as text and tokenised alone:

1. the template's *closing* of an assistant turn (ChatML: ``<|im_end|>\\n``), found once
   by rendering a one-message assistant turn around a marker and taking what follows it;
   when the completion already ends with the closing's first token (the model sampled its
   end-of-turn token; it must be a special token), that token is not added again;
2. the *delta* of the new messages (tool results, user turns): the rendering of the
   history plus the new messages (with the generation prompt) minus the rendering of the
   history alone. The history render must be a prefix of the longer one; a template that
   renders earlier turns differently once later ones exist fails here with a
   :class:`~envhub.errors.PolicyError` instead of drifting silently.

Rendering the real history (not a stand-in conversation) keeps whatever the template
puts between turns exactly as it would render the whole chat; only the model's own
tokens differ from a full re-rendering, which is the point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envhub.errors import PolicyError
from envhub.trainers.tokens import template_message
from envhub.types import Message

__all__ = ["ChatRenderer"]

_MARKER = "\u2063envhub-assistant-marker\u2063"  # text no template or model writes


class ChatRenderer:
    """Renders prompts with ``tokenizer``'s chat template (a ``transformers`` tokenizer)."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise PolicyError(
                "the tokenizer has no chat template; give one (--chat-template) or use a "
                "tokenizer that ships one"
            )
        self.tokenizer = tokenizer
        self._closing: str | None = None
        self._special_ids = set(tokenizer.all_special_ids) | set(
            getattr(tokenizer, "added_tokens_decoder", {}) or {}
        )

    def first_prompt(self, messages: Sequence[Message], tools: list[dict[str, Any]]) -> list[int]:
        """The ids of the opening messages and tools, ending with the generation prompt."""
        return self.encode(self._text(messages, tools, generation=True))

    def continuation(
        self,
        completion_ids: Sequence[int],
        history: Sequence[Message],
        new_messages: Sequence[Message],
        tools: list[dict[str, Any]],
    ) -> list[int]:
        """The ids that follow ``completion_ids`` (the sampled ids of ``history``'s last,
        assistant, message) up to the next generation prompt: the assistant turn's
        closing and the ``new_messages`` (module docstring)."""
        before = self._text(history, tools, generation=False)
        after = self._text([*history, *new_messages], tools, generation=True)
        if not after.startswith(before):
            raise PolicyError(
                "the chat template renders earlier turns differently once new messages "
                "follow them, so a later prompt cannot extend the sampled ids; use a "
                "template that keeps history as rendered"
            )
        tail = self.encode(self.closing() + after[len(before) :])
        if (
            tail
            and completion_ids
            and completion_ids[-1] == tail[0]
            and tail[0] in self._special_ids
        ):
            tail = tail[1:]  # the model sampled the end-of-turn token itself
        return tail

    def closing(self) -> str:
        """What the template writes after an assistant message's content."""
        if self._closing is None:
            text = self._text(
                [{"role": "user", "content": "x"}, {"role": "assistant", "content": _MARKER}],
                [],
                generation=False,
            )
            if _MARKER not in text:
                raise PolicyError("the chat template does not render assistant content")
            self._closing = text[text.rindex(_MARKER) + len(_MARKER) :]
        return self._closing

    def encode(self, text: str) -> list[int]:
        """Token ids of template text (special-token markup included, nothing added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of sampled ids, special tokens left out (what tool parsers read)."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def _text(
        self, messages: Sequence[Message], tools: list[dict[str, Any]], *, generation: bool
    ) -> str:
        try:
            text = self.tokenizer.apply_chat_template(
                [template_message(dict(m)) for m in messages],
                tools=tools or None,
                add_generation_prompt=generation,
                tokenize=False,
            )
        except Exception as exc:  # jinja raises its own errors (e.g. role alternation)
            raise PolicyError(f"the chat template failed: {type(exc).__name__}: {exc}") from exc
        return str(text)
