"""The circuit breaker that stops a rollout from burning its task list into a dead server.

Every masked episode has already been retried (``max_env_attempts`` fresh sessions, each
call retried by the client; the model's requests by the policy), so a run of masked
episodes in a row means the environment or the model server is down, not flaky: going on
would only turn the rest of the task list into masked records. After ``threshold`` of
them in a row the breaker opens and the dispatcher starts no new episode; the ones in
flight finish (they are masked too if the server stays down) and the run reports why.
"""

from __future__ import annotations

from envhub.errors import InvalidRequest
from envhub.trajectory import Trajectory

__all__ = ["DEFAULT_BREAKER_THRESHOLD", "CircuitBreaker"]

DEFAULT_BREAKER_THRESHOLD = 20


class CircuitBreaker:
    """Opens after ``threshold`` masked episodes in a row (in completion order); a scored
    episode resets the count."""

    def __init__(self, threshold: int = DEFAULT_BREAKER_THRESHOLD) -> None:
        if threshold < 1:
            raise InvalidRequest(f"the circuit breaker threshold must be >= 1, got {threshold}")
        self.threshold = threshold
        self.in_a_row = 0
        self.reason: str | None = None  # set when the breaker opens

    @property
    def open(self) -> bool:
        return self.reason is not None

    def record(self, trajectory: Trajectory) -> None:
        if not trajectory.masked:
            self.in_a_row = 0
            return
        self.in_a_row += 1
        if self.reason is None and self.in_a_row >= self.threshold:
            error = trajectory.error
            last = f"{error.kind}: {error.message}" if error else "no error recorded"
            self.reason = (
                f"{self.in_a_row} episodes in a row were masked (the last: "
                f"{trajectory.stop_reason}, {last[:300]})"
            )
