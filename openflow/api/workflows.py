"""`/workflows`: the caller's workflow catalog and validation without saving."""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import APIRouter, Path, Response

from openflow.api.deps import CatalogDep, TenantDep
from openflow.api.errors import Unprocessable, documented
from openflow.api.models import ValidationOk
from openflow.api.routing import StrictJsonRoute
from openflow.engine.graph import workflow_problems
from openflow.engine.spec import Workflow

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
    return ValidationOk()


@router.get("/{workflow_id}", response_model=Workflow, responses=documented(401, 404, 422))
def get_workflow(workflow_id: WorkflowId, catalog: CatalogDep) -> Workflow:
    """One workflow of your catalog."""
    return catalog.get(workflow_id)


@router.put(
    "/{workflow_id}",
    response_model=Workflow,
    responses={
        **documented(400, 401, 413, 422),
        201: {"model": Workflow, "description": "Created"},
    },
)
def put_workflow(
    workflow_id: WorkflowId, workflow: Workflow, catalog: CatalogDep, response: Response
) -> Workflow:
    """Create or replace a workflow (200 replaced, 201 created); it must be valid."""
    if workflow.id != workflow_id:
        raise Unprocessable(
            f"the body's id {workflow.id!r} differs from the path's {workflow_id!r}; "
            "make them equal",
            code="id_mismatch",
        )
    check_workflow(workflow)
    with _WRITES:
        existed = any(wf.id == workflow_id for wf in catalog.list())
        catalog.save(workflow)
    if not existed:
        response.status_code = 201
    return workflow


@router.delete(
    "/{workflow_id}", status_code=204, response_class=Response, responses=documented(401, 404, 422)
)
def delete_workflow(workflow_id: WorkflowId, catalog: CatalogDep) -> Response:
    """Remove a workflow from your catalog; runs started from it go on unchanged."""
    with _WRITES:
        catalog.delete(workflow_id)
    return Response(status_code=204)


__all__ = ["check_workflow", "router"]
