"""`/health`: whether the API is up and reaches Temporal (no key needed, tells nothing about runs)."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter
from temporalio.service import RPCError

from openflow.api.deps import ContextDep
from openflow.api.errors import ServiceUnavailable
from openflow.api.models import Health
from openflow.api.routing import StrictJsonRoute

router = APIRouter(tags=["health"], route_class=StrictJsonRoute)

HEALTH_TIMEOUT = timedelta(seconds=2)


@router.get("/health", response_model=Health)
async def health(context: ContextDep) -> Health:
    """`ok` when Temporal answers, `degraded` when it does not."""
    reachable = False
    try:
        client = await context.temporal()
        reachable = await client.service_client.check_health(timeout=HEALTH_TIMEOUT)
    except (ServiceUnavailable, RPCError):
        reachable = False
    return Health(
        status="ok" if reachable else "degraded",
        temporal="connected" if reachable else "unreachable",
        namespace=context.namespace,
        task_queue=context.task_queue,
    )


__all__ = ["router"]
