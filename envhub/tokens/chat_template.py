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

Message text is data, never markup: a tool result that prints ``<|im_end|>`` (a hostile
command can) must not close the turn in the model's context. Before rendering, every
special-token string inside a message's content is swapped for a placeholder; the
rendered text is encoded around the placeholders, and each one becomes the ids of its
text spelled as ordinary tokens (``split_special_tokens``). The template's own markup
keeps its special tokens, and any template (one that trims content too) renders the
placeholders where the text was.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from envhub.errors import PolicyError
from envhub.model_text import ModelTextError, read_arguments
from envhub.types import Message, chat_message

__all__ = ["ChatRenderer", "template_message"]

_MARKER = "\u2063envhub-assistant-marker\u2063"  # text no template or model writes
_LITERAL = "\u2063envhub-literal-{}\u2063"  # a special-token string found in message text
_LITERAL_RE = re.compile("\u2063envhub-literal-(\\d+)\u2063")


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as Hugging Face chat templates expect it: string content and
    tool-call arguments as objects (most templates ``tojson`` them, which would
    double-encode the JSON strings of the OpenAI wire format), without the keys only
    envhub's records carry (:func:`envhub.types.chat_message`)."""
    out = dict(chat_message(message))
    if out.get("content") is None:
        out["content"] = ""
    calls = out.get("tool_calls")
    if calls:
        fixed = []
        for call in calls:
            function = dict(call.get("function") or {})
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    function["arguments"] = read_arguments(arguments)
                except ModelTextError:
                    pass  # malformed arguments stay the text the model wrote
            fixed.append({**call, "function": function})
        out["tool_calls"] = fixed
    return out



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
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self._special_ids = set(tokenizer.all_special_ids) | set(added)
        specials = {str(t) for t in tokenizer.all_special_tokens} | {
            str(t.content) for t in added.values() if getattr(t, "special", False)
        }
        specials.discard("")
        # longest first, so a token that contains another is matched whole; a message
        # that spells a placeholder itself gets that text taken as a literal too
        self._specials = re.compile(
            "|".join(
                [_LITERAL_RE.pattern]
                + [re.escape(t) for t in sorted(specials, key=len, reverse=True)]
            )
        )

    def first_prompt(self, messages: Sequence[Message], tools: list[dict[str, Any]]) -> list[int]:
        """The ids of the opening messages and tools, ending with the generation prompt."""
        literals: list[str] = []
        return self._encode(
            self._text(messages, tools, generation=True, literals=literals), literals
        )

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
        literals: list[str] = []
        before = self._text(history, tools, generation=False, literals=[])
        after = self._text([*history, *new_messages], tools, generation=True, literals=literals)
        if not after.startswith(before):
            raise PolicyError(
                "the chat template renders earlier turns differently once new messages "
                "follow them, so a later prompt cannot extend the sampled ids; use a "
                "template that keeps history as rendered"
            )
        tail = self._encode(self.closing() + after[len(before) :], literals)
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
                literals=[],
            )
            if _MARKER not in text:
                raise PolicyError("the chat template does not render assistant content")
            self._closing = text[text.rindex(_MARKER) + len(_MARKER) :]
        return self._closing

    def _encode(self, text: str, literals: Sequence[str]) -> list[int]:
        """Token ids of rendered text: markup with its special tokens, each placeholder
        as its literal's text in ordinary tokens (module docstring); nothing added."""
        ids: list[int] = []
        parts = _LITERAL_RE.split(text)  # markup, literal index, markup, ...
        for index, part in enumerate(parts):
            if index % 2:
                ids += self.tokenizer.encode(
                    literals[int(part)], add_special_tokens=False, split_special_tokens=True
                )
            elif part:
                ids += self.tokenizer.encode(part, add_special_tokens=False)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of sampled ids, special tokens left out (what tool parsers read)."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def _protect(self, message: Message, literals: list[str]) -> dict[str, Any]:
        """``message`` for the template, each special-token string in its text content
        swapped for a placeholder that indexes ``literals``."""
        out = template_message(dict(message))
        content = out.get("content")
        if isinstance(content, str):

            def placeholder(match: re.Match[str]) -> str:
                literals.append(match.group())
                return _LITERAL.format(len(literals) - 1)

            out["content"] = self._specials.sub(placeholder, content)
        return out

    def _text(
        self,
        messages: Sequence[Message],
        tools: list[dict[str, Any]],
        *,
        generation: bool,
        literals: list[str],
    ) -> str:
        """The template's rendering of ``messages``, their special-token strings as
        placeholders numbered in message order (so a history renders the same alone and
        with later messages) into ``literals``."""
        protected = [self._protect(m, literals) for m in messages]
        try:
            text = self.tokenizer.apply_chat_template(
                protected,
                tools=tools or None,
                add_generation_prompt=generation,
                tokenize=False,
            )
        except Exception as exc:  # jinja raises its own errors (e.g. role alternation)
            raise PolicyError(f"the chat template failed: {type(exc).__name__}: {exc}") from exc
        return str(text)
