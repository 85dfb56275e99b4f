"""Token-in/token-out requests for each inference server: the request body for a prompt
given as token ids, and the sampled ids and logprobs read from the reply.

Each server names things its own way (checked against their documentation and source):

- llama.cpp's ``llama-server``: ``POST /completion`` with ``prompt`` as an array of ids,
  ``return_tokens`` for the sampled ids (``tokens``; an end-of-generation token the model
  sampled is included) and ``n_probs: 1`` for ``completion_probabilities[i].logprob`` (the
  model's log-softmax, before the sampler chain). Its sampler defaults (top-k 40, min-p
  0.05) are switched off so that ``temperature``/``top_p`` mean what they mean on vLLM.
  ``stop_type`` is ``eos``, ``limit`` or ``word``.
- vLLM: ``POST /v1/completions`` with ``prompt`` as a list of ids, ``return_token_ids``
  (``choices[0].token_ids``, ``choices[0].prompt_token_ids``) and ``logprobs: 0`` (only
  the sampled token's, ``choices[0].logprobs.token_logprobs``). ``max_tokens`` is always
  sent, as ``null`` when unset: vLLM's ``CompletionRequest.max_tokens`` defaults to 16 (the
  OpenAI completions default), so an omitted field cut every turn at 16 tokens, while an
  explicit ``null`` lets it sample up to the rest of the context (or the model's
  generation-config default, where the server has one).
- SGLang: ``POST /generate`` with ``input_ids`` and ``return_logprob``; the sampled ids
  and their logprobs are ``meta_info.output_token_logprobs`` (``[logprob, id, text]``
  each; ``output_ids`` where logprobs are absent), ``meta_info.finish_reason.type`` is
  ``stop``/``length``/``abort``. ``meta_info.weight_version`` is the label of the weights
  that served the request (what ``/update_weights_from_disk`` was given;
  :class:`~envhub.policies.weight_sync.SGLangSync` sends the integer version):
  :meth:`SGLangBackend.weight_version` reads it as the turn's version when it is an
  integer (``7`` or ``"7"``) and ignores other labels (SGLang's default is ``"default"``).

Replies become a :class:`~envhub.tokens.sample.Sample` (``finished`` is false
when the token limit cut the completion, ``aborted`` true when the server ended it early:
vLLM's and SGLang's ``abort``, a weight update). A backend is stateless: the policy sends the
body to the ``path`` below an endpoint's base URL, through its endpoint pool, and hands
the parsed JSON back to :meth:`parse`. Backends are found by name in the
``envhub.tito_backends`` entry-point group (:func:`tito_backend`), where a plugin adds a
server kind as envhub registers these three.
"""

from __future__ import annotations

from typing import Any, Protocol

from envhub.errors import PolicyError
from envhub.policies.base import SamplingParams
from envhub.policies.factory import TITO_BACKENDS
from envhub.policies.weight_sync import parse_version
from envhub.registry import load_plugin
from envhub.tokens.sample import Sample

__all__ = [
    "TITO_BACKENDS",
    "LlamaCppBackend",
    "SGLangBackend",
    "TitoBackend",
    "VLLMBackend",
    "tito_backend",
]


class TitoBackend(Protocol):
    """The request body and reply parsing of one server kind (module docstring)."""

    name: str
    path: str

    def body(
        self, model: str, prompt_ids: list[int], sampling: SamplingParams
    ) -> dict[str, Any]: ...

    def parse(self, data: Any) -> Sample: ...

    def weight_version(self, data: Any) -> int | None:
        """The weight version the reply itself names (``None``: it names none; the
        policy then records the transport's, from a header or ``/models``)."""
        ...


def _reply_error(backend: str, detail: str, data: Any) -> PolicyError:
    return PolicyError(f"{backend} reply {detail}: {str(data)[:300]}")


def _logprobs(values: list[Any], expected: int, backend: str, data: Any) -> list[float] | None:
    """Logprobs as floats, one per sampled id, or ``None`` if the server sent none."""
    if not values:
        return None
    if len(values) != expected:
        raise _reply_error(backend, f"has {len(values)} logprobs for {expected} tokens", data)
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):  # a missing (None) or non-numeric logprob
        raise _reply_error(backend, "has a token without a numeric logprob", data) from None


class LlamaCppBackend:
    """llama.cpp ``llama-server`` ``/completion`` (base URL without ``/v1``)."""

    name = "llama.cpp"
    path = "/completion"

    def body(self, model: str, prompt_ids: list[int], sampling: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": prompt_ids,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": 0,
            "min_p": 0.0,
            "repeat_penalty": 1.0,
            "n_predict": -1 if sampling.max_tokens is None else sampling.max_tokens,
            "return_tokens": True,
            "n_probs": 1,
            "cache_prompt": True,
        }
        body.update(sampling.extra)
        return body

    def parse(self, data: Any) -> Sample:
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
            raise _reply_error(self.name, "has no token ids (return_tokens)", data)
        ids = [int(t) for t in data["tokens"]]
        probs = data.get("completion_probabilities") or []
        values = [p.get("logprob") if isinstance(p, dict) else None for p in probs]
        logprobs = _logprobs(values, len(ids), self.name, data)
        return Sample(ids, logprobs, finished=data.get("stop_type") != "limit")

    def weight_version(self, data: Any) -> int | None:
        return None  # llama-server has no weight updates


class VLLMBackend:
    """vLLM ``/v1/completions`` (base URL ending in ``/v1``)."""

    name = "vllm"
    path = "/completions"

    def body(self, model: str, prompt_ids: list[int], sampling: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "prompt": prompt_ids,
            **sampling.to_request(),
            "logprobs": 0,
            "return_token_ids": True,
        }
        body.setdefault("max_tokens", None)  # omitted means 16 tokens (module docstring)
        return body

    def parse(self, data: Any) -> Sample:
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices:
            raise _reply_error(self.name, "has no choices", data)
        choice = choices[0]
        if not isinstance(choice.get("token_ids"), list):
            raise _reply_error(self.name, "has no token ids (return_token_ids)", data)
        ids = [int(t) for t in choice["token_ids"]]
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
        reason = choice.get("finish_reason")
        logprobs = _logprobs(logprobs, len(ids), self.name, data)
        return Sample(ids, logprobs, reason != "length", aborted=reason == "abort")

    def weight_version(self, data: Any) -> int | None:
        return None  # not in the reply: a response header or /v1/models (the transport)


class SGLangBackend:
    """SGLang ``/generate`` (the server's root URL, no ``/v1``)."""

    name = "sglang"
    path = "/generate"

    def body(self, model: str, prompt_ids: list[int], sampling: SamplingParams) -> dict[str, Any]:
        params: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p}
        if sampling.max_tokens is not None:
            params["max_new_tokens"] = sampling.max_tokens
        params.update(sampling.extra)
        return {"input_ids": prompt_ids, "sampling_params": params, "return_logprob": True}

    def parse(self, data: Any) -> Sample:
        meta = data.get("meta_info") if isinstance(data, dict) else None
        if not isinstance(meta, dict):
            raise _reply_error(self.name, "has no meta_info", data)
        entries = meta.get("output_token_logprobs") or []
        if entries:
            ids = [int(entry[1]) for entry in entries]
            logprobs: list[float] | None = [float(entry[0]) for entry in entries]
        elif isinstance(data.get("output_ids"), list):
            ids, logprobs = [int(t) for t in data["output_ids"]], None
        else:
            raise _reply_error(self.name, "has no token ids (return_logprob)", data)
        reason = meta.get("finish_reason")
        kind = reason.get("type") if isinstance(reason, dict) else reason
        return Sample(ids, logprobs, finished=kind != "length", aborted=kind == "abort")

    def weight_version(self, data: Any) -> int | None:
        """``meta_info.weight_version`` when it is an integer or an integer's digits;
        ``None`` for any other label (``"default"`` until an update names one)."""
        meta = data.get("meta_info") if isinstance(data, dict) else None
        return parse_version(meta.get("weight_version")) if isinstance(meta, dict) else None


def tito_backend(name: str) -> TitoBackend:
    """A backend of the kind registered as ``name`` (``llama.cpp``, ``vllm``, ``sglang``,
    a plugin's) or named ``module:Class``; an unknown name is an :class:`InvalidRequest`
    listing the installed ones."""
    return load_plugin(TITO_BACKENDS, name)()
