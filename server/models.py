"""Request and response bodies of the HTTP API that are not already core wire types.

Session results (:class:`~envhub.types.SessionStart`, ``StepResult``, ``CloseResult``,
``SessionInfo``) come from :mod:`envhub.types`, so the server and the in-process session
cannot drift apart; this module holds only what is specific to HTTP.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envhub.budgets import Budgets
from envhub.types import ToolCall

__all__ = [
    "SESSION_ID_PATTERN",
    "CreateSession",
    "EnvironmentInfo",
    "EnvironmentList",
    "ErrorBody",
    "ErrorDetail",
    "Health",
    "StepRequest",
    "TaskPage",
]

SESSION_ID_PATTERN = r"^[A-Za-z0-9._~-]{1,128}$"
"""Client-chosen session ids appear in URL paths, so they are limited to unreserved characters."""


class Health(BaseModel):
    status: str = "ok"
    version: str


class EnvironmentInfo(BaseModel):
    """One hosted environment: what a client needs before opening sessions on it."""

    name: str
    version: str
    tools: list[dict[str, Any]] = Field(description="OpenAI function-tool JSON schemas")
    tasks: int
    splits: list[str]
    options: dict[str, Any] = Field(description="options the server's operator hosts it with")
    client_options: dict[str, dict[str, Any]] = Field(
        description="options a client may set in POST /v1/sessions: name -> JSON schema with "
        "the type and bounds; any other option is refused"
    )
    budgets: Budgets


class EnvironmentList(BaseModel):
    environments: list[EnvironmentInfo]


class TaskPage(BaseModel):
    env: str
    split: str | None
    offset: int
    limit: int
    total: int = Field(description="task count of the split, for paging")
    task_ids: list[str]


class CreateSession(BaseModel):
    """``POST /v1/sessions``; with ``session_id`` set, repeating the call is safe."""

    model_config = ConfigDict(extra="forbid")

    env: str
    task_id: str | None = None
    seed: int | None = None
    options: dict[str, Any] | None = Field(
        None,
        description="client-settable options of the environment (its client_options), "
        "validated, then merged over the hosted ones",
    )
    session_id: str | None = Field(None, pattern=SESSION_ID_PATTERN)


class StepRequest(BaseModel):
    """One assistant turn: its tool calls (flat or OpenAI form) and optional text."""

    model_config = ConfigDict(extra="forbid")

    tool_calls: list[ToolCall] = Field(default_factory=list)
    content: str | None = None
    request_id: str | None = Field(
        None, max_length=128, description="repeat it to get the stored reply instead of a rerun"
    )


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every non-2xx answer of the API has this body."""

    error: ErrorDetail
