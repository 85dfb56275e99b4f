"""Hosted environments and their task ids."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from envhub.server.models import EnvironmentList
from envhub.server.routes._deps import ERRORS, store_of
from envhub.types import EnvironmentInfo, TaskPage

__all__ = ["router"]

router = APIRouter(prefix="/v1/environments", tags=["environments"])


@router.get("", responses=ERRORS(401))
async def list_environments(request: Request) -> EnvironmentList:
    """Hosted environments with version, tool schemas, task count, hosted options, the
    options a client may set (JSON schemas with bounds) and budgets."""
    hosted = store_of(request).envs.values()
    return EnvironmentList(environments=[await h.info() for h in hosted])


@router.get("/{env}", responses=ERRORS(401, 404))
async def get_environment(env: str, request: Request) -> EnvironmentInfo:
    return await store_of(request).hosted(env).info()


@router.get("/{env}/tasks", responses=ERRORS(400, 401, 404, 422))
async def list_tasks(
    env: str,
    request: Request,
    split: str | None = None,
    offset: int = Query(0, ge=0),
    limit: int = Query(100, ge=1, le=10_000),
) -> TaskPage:
    """Task ids in their fixed order, one page at a time (``split`` omitted: all tasks)."""
    base = store_of(request).hosted(env).base
    ids = await base.task_ids(split)
    return TaskPage(
        env=env, split=split, offset=offset, limit=limit, total=len(ids),
        task_ids=ids[offset:offset + limit],
    )
