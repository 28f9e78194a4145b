"""`/workflows`: the caller's workflow catalog and validation without saving."""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import APIRouter, Path, Response
from starlette.concurrency import run_in_threadpool

from openflow.api.deps import CatalogDep, RunsDep, TenantDep
from openflow.api.errors import Unprocessable, documented
from openflow.api.models import ValidationOk
from openflow.api.routing import StrictJsonRoute
from openflow.api.schedules import schedule_errors
from openflow.catalog import Catalog, WorkflowNotFoundError
from openflow.engine.graph import workflow_problems
from openflow.engine.spec import Workflow
from openflow.schedules import Schedules, check_schedule

router = APIRouter(prefix="/workflows", tags=["workflows"], route_class=StrictJsonRoute)

#: Catalog writes read, change and replace a whole file: one at a time per process.
_WRITES = threading.Lock()

WorkflowId = Annotated[str, Path(min_length=1, max_length=256, description="The workflow id")]


def check_workflow(workflow: Workflow) -> None:
    """Raise a 422 listing every problem of the workflow, each naming its node or edge.

    A workflow over a limit (`limit_exceeded`) gets only its limit problems.
    """
    problems = workflow_problems(workflow)
    if not problems:
        return
    message = problems[0].message
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more; see details)"
    code = "limit_exceeded" if problems[0].code == "LimitExceeded" else "invalid_workflow"
    raise Unprocessable(message, code=code, details=[problem.as_dict() for problem in problems])


@router.get("", response_model=list[Workflow], responses=documented(401))
def list_workflows(catalog: CatalogDep) -> list[Workflow]:
    """Every workflow of your catalog."""
    return catalog.list()


@router.post("/validate", response_model=ValidationOk, responses=documented(400, 401, 413, 422))
def validate_workflow(workflow: Workflow, tenant: TenantDep) -> ValidationOk:
    """Check a workflow against every rule; 422 lists each problem with its node or edge."""
    check_workflow(workflow)
    with schedule_errors():
        check_schedule(workflow)
    return ValidationOk()


@router.get("/{workflow_id}", response_model=Workflow, responses=documented(401, 404, 422))
def get_workflow(workflow_id: WorkflowId, catalog: CatalogDep) -> Workflow:
    """One workflow of your catalog."""
    return catalog.get(workflow_id)


@router.put(
    "/{workflow_id}",
    response_model=Workflow,
    responses={
        **documented(400, 401, 409, 413, 422, 503),
        201: {"model": Workflow, "description": "Created"},
    },
)
async def put_workflow(
    workflow_id: WorkflowId,
    workflow: Workflow,
    catalog: CatalogDep,
    runs: RunsDep,
    response: Response,
) -> Workflow:
    """Create or replace a workflow (200 replaced, 201 created); it must be valid.

    Its `settings.schedule` creates, updates or pauses the schedule `openflow-schedule-<id>`;
    without one, a schedule it had is deleted.
    """
    if workflow.id != workflow_id:
        raise Unprocessable(
            f"the body's id {workflow.id!r} differs from the path's {workflow_id!r}; "
            "make them equal",
            code="id_mismatch",
        )
    check_workflow(workflow)
    schedules = Schedules(runs)
    with schedule_errors():
        check_schedule(workflow)
        await schedules.check_owner(workflow_id)
        # The schedule first: what Temporal refuses leaves the catalog untouched.
        await schedules.apply(workflow)
    existed = await run_in_threadpool(_save, catalog, workflow)
    if not existed:
        response.status_code = 201
    return workflow


def _save(catalog: Catalog, workflow: Workflow) -> bool:
    with _WRITES:
        existed = any(wf.id == workflow.id for wf in catalog.list())
        catalog.save(workflow)
    return existed


@router.delete(
    "/{workflow_id}",
    status_code=204,
    response_class=Response,
    responses=documented(401, 404, 409, 422, 503),
)
async def delete_workflow(workflow_id: WorkflowId, catalog: CatalogDep, runs: RunsDep) -> Response:
    """Remove a workflow and its schedule; runs started from it go on unchanged."""
    schedules = Schedules(runs)
    with schedule_errors():
        await schedules.check_owner(workflow_id)
        try:
            await run_in_threadpool(_delete, catalog, workflow_id)
        except WorkflowNotFoundError:
            if not await schedules.remove(workflow_id):
                raise
            return Response(status_code=204)
        await schedules.remove(workflow_id)
    return Response(status_code=204)


def _delete(catalog: Catalog, workflow_id: str) -> None:
    with _WRITES:
        catalog.delete(workflow_id)


__all__ = ["check_workflow", "router"]
