"""Session lifecycle: create -> step* (fork*) -> close, and a state summary."""

from __future__ import annotations

from fastapi import APIRouter, Request

from envhub.server.routes._deps import ERRORS, store_of
from envhub.types import (
    CloseResult,
    CreateSession,
    ForkRequest,
    ForkResult,
    SessionInfo,
    SessionStart,
    StepRequest,
    StepResult,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


@router.post("", responses=ERRORS(400, 401, 404, 413, 422, 429, 500, 503))
async def create_session(body: CreateSession, request: Request) -> SessionStart:
    """Reset a new episode; a repeated client-chosen ``session_id`` returns the same start."""
    return await store_of(request).create(body)


@router.post("/{session_id}/step", responses=ERRORS(401, 404, 409, 413, 422, 500, 503))
async def step_session(session_id: str, body: StepRequest, request: Request) -> StepResult:
    """Run one assistant turn's tool calls; malformed calls become ``is_error`` observations."""
    return await store_of(request).step(session_id, body)


@router.post("/{session_id}/fork", responses=ERRORS(400, 401, 404, 409, 413, 422, 429, 500, 503))
async def fork_session(session_id: str, body: ForkRequest, request: Request) -> ForkResult:
    """Fork the episode into ``n`` children, each a session with the parent's state, turns,
    budgets used and metrics (counted against capacity: 429 when they do not fit); a
    repeated ``fork_id`` returns the same children. 409: the session is closed or has
    ended (``session_closed``), or replaying it did not reproduce it
    (``not_deterministic``)."""
    return await store_of(request).fork(session_id, body)


@router.post("/{session_id}/close", responses=ERRORS(401, 404, 500, 503))
async def close_session(session_id: str, request: Request) -> CloseResult:
    """Score the episode and free its resources; closing again returns the same result."""
    return await store_of(request).close(session_id)


@router.get("/{session_id}", responses=ERRORS(401, 404))
async def get_session(session_id: str, request: Request) -> SessionInfo:
    return store_of(request).info(session_id)
