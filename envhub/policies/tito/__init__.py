"""Token-in/token-out rollouts: the ``tito`` policy, its server backends and prompt renderer.

See :mod:`envhub.policies.tito.policy` for the contract, :mod:`.backends` for the
llama.cpp, vLLM and SGLang request shapes and :mod:`.render` for how later prompts
extend earlier ones.
"""

from __future__ import annotations

from envhub.policies.tito.backends import TITO_BACKENDS as TITO_BACKENDS
from envhub.policies.tito.backends import LlamaCppBackend as LlamaCppBackend
from envhub.policies.tito.backends import SGLangBackend as SGLangBackend
from envhub.policies.tito.backends import TitoBackend as TitoBackend
from envhub.policies.tito.backends import VLLMBackend as VLLMBackend
from envhub.policies.tito.backends import tito_backend as tito_backend
from envhub.policies.tito.policy import TitoPolicy as TitoPolicy
from envhub.tokens.chat_template import ChatRenderer as ChatRenderer

__all__ = [
    "TITO_BACKENDS",
    "ChatRenderer",
    "LlamaCppBackend",
    "SGLangBackend",
    "TitoBackend",
    "TitoPolicy",
    "VLLMBackend",
    "tito_backend",
]
