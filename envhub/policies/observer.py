"""What a policy reports about its model requests, for whoever watches a run.

A policy that talks to model servers (:class:`~envhub.policies.OpenAIPolicy`) accepts a
:class:`RequestObserver` through ``observe()`` and tells it about every HTTP request it
sends (which endpoint, how long, the tokens or the kind of failure) and every endpoint
its pool ejects. The rollout's Prometheus metrics
(:class:`envhub.rollout.metrics.RolloutMetrics`) are one observer; the policy imports
nothing of them, and without an observer it pays one ``is None`` test per request.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from envhub.policies.base import Completion

__all__ = ["ObservablePolicy", "RequestObserver"]


class RequestObserver(Protocol):
    """Told about each model request as it ends (called in the event loop: be quick)."""

    def request_done(self, endpoint: str, seconds: float, completion: Completion) -> None:
        """A request to ``endpoint`` answered with ``completion`` after ``seconds``."""

    def request_failed(self, endpoint: str, seconds: float, kind: str) -> None:
        """A request to ``endpoint`` failed after ``seconds``: ``kind`` is ``"timeout"``,
        ``"connection"`` or the :class:`~envhub.errors.PolicyError` code (a retry, if
        any, is another request)."""

    def endpoint_ejected(self, endpoint: str) -> None:
        """The pool stopped sending requests to ``endpoint`` (it failed too often)."""


@runtime_checkable
class ObservablePolicy(Protocol):
    """A policy that reports its requests to an observer (``None``: stop reporting)."""

    def observe(self, observer: RequestObserver | None) -> None: ...
