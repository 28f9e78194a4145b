"""`/runs`: start, list, look at, follow, act on, stop and resume the caller's runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path as FsPath
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from openflow import contracts as c
from openflow.api.auth import tenant_home
from openflow.api.deps import ContextDep, RunsDep, TenantDep
from openflow.api.errors import Unprocessable, documented
from openflow.api.models import (
    ActionResult,
    ApprovalBody,
    BudgetBody,
    InputBody,
    InterruptBody,
    MessageBody,
    ResumeBody,
    RetryBody,
    RevertResult,
    RevokeBody,
    RunRef,
    RunStatus,
    StartRun,
)
from openflow.api.routing import StrictJsonRoute
from openflow.api.sse import MEDIA_TYPE, event_stream, stream_response, wants_stream
from openflow.api.uploads import AttachmentsRoute, multipart_doc, uploads_of
from openflow.api.workflows import check_workflow
from openflow.attachments import Upload
from openflow.catalog import Catalog
from openflow.client import RunSummary
from openflow.engine.events import RunEvent
from openflow.engine.projection import WorkflowRunState
from openflow.engine.spec import Workflow
from openflow.settings import load_settings
from openflow.telemetry import joined_trace

router = APIRouter(prefix="/runs", tags=["runs"], route_class=StrictJsonRoute)

RunId = Annotated[str, Path(min_length=1, max_length=1000, description="The run id")]
MAX_SEQ = 2**53
_ACT_ERRORS = documented(400, 401, 404, 409, 413, 422, 503)


def _post_with_attachments(
    path: str, fields: dict[str, dict[str, Any]], required: list[str], **kw: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`router.post` for a route whose body may also come as multipart form data with files."""

    def decorate(endpoint: Callable[..., Any]) -> Callable[..., Any]:
        router.add_api_route(
            path,
            endpoint,
            methods=["POST"],
            route_class_override=AttachmentsRoute,
            openapi_extra=multipart_doc(fields, required),
            **kw,
        )
        return endpoint

    return decorate


_TEXT = {"type": "string"}


@_post_with_attachments(
    "",
    {
        "workflow_id": _TEXT,
        "workflow": {"type": "string", "description": "An inline workflow as JSON text"},
        "entrypoint": _TEXT,
        "run_id": _TEXT,
        "project_dir": _TEXT,
        "provider_id": _TEXT,
        "allowConcurrent": {"type": "boolean"},
        "budget": {"type": "string", "description": "The run's budget as JSON text"},
    },
    [],
    status_code=201,
    response_model=RunRef,
    responses=documented(400, 401, 404, 409, 413, 422, 503),
)
async def start_run(
    body: StartRun,
    runs: RunsDep,
    context: ContextDep,
    tenant: TenantDep,
    response: Response,
    request: Request,
) -> RunRef:
    """Start a run of a catalog workflow (snapshotted now) or of an inline workflow.

    The body is JSON, or multipart form data with the same fields and files to attach to the
    entrypoint. A run on a `project_dir` another live run is changing is refused (409) unless
    `allowConcurrent`. With tracing on, a W3C `traceparent` header makes the run's spans part
    of the caller's trace."""
    project = _project_dir(body.project_dir)
    workflow = body.workflow
    if workflow is None:
        catalog = Catalog(tenant_home(context.home, tenant), project)
        workflow = await run_in_threadpool(_catalog_get, catalog, body.workflow_id or "")
    check_workflow(workflow)
    if body.provider_id is not None:
        settings = await run_in_threadpool(load_settings, context.home)
        if settings.profile(body.provider_id) is None:
            raise Unprocessable(
                f"provider {body.provider_id!r} is not in settings.json; use one of "
                f"{sorted(settings.providers)!r}",
                code="unknown_provider",
            )
    with joined_trace(request.headers):
        run_id = await runs.start(
            workflow,
            entrypoint=body.entrypoint,
            run_id=body.run_id,
            project_dir=str(project) if project else None,
            provider_id=body.provider_id,
            attachments=uploads_of(request),
            allow_concurrent=body.allow_concurrent,
            budget=body.budget,
        )
    response.headers["Location"] = f"/runs/{run_id}"
    return RunRef(run_id=run_id, status="running", workflow_id=workflow.id)


def _catalog_get(catalog: Catalog, workflow_id: str) -> Workflow:
    return catalog.get(workflow_id)


def _project_dir(value: str | None) -> FsPath | None:
    if value is None:
        return None
    if "\x00" in value:
        raise Unprocessable("project_dir contains a NUL character; send a folder path")
    path = FsPath(value)
    if not path.is_absolute():
        raise Unprocessable(
            f"project_dir {value!r} is not an absolute path; send the folder's full path",
            code="invalid_project_dir",
        )
    if not path.is_dir():
        raise Unprocessable(
            f"project_dir {value!r} is not a folder on the server; create it first",
            code="invalid_project_dir",
        )
    return path


@router.get("", response_model=list[RunSummary], responses=documented(401, 422, 503))
async def list_runs(
    runs: RunsDep,
    status: Annotated[RunStatus | None, Query(description="Only runs in this status")] = None,
    workflow_id: Annotated[
        str | None, Query(max_length=256, description="Only runs of this workflow")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[RunSummary]:
    """Your runs, newest first, from Temporal's visibility."""
    return await runs.list(status=status, workflow_id=workflow_id or None, limit=limit)


@router.get(
    "/{run_id}",
    response_model=WorkflowRunState,
    responses=documented(401, 404, 422, 503),
)
async def get_run(run_id: RunId, runs: RunsDep) -> WorkflowRunState:
    """The run as a person sees it (the `state` query)."""
    return await runs.state(run_id)


@router.get(
    "/{run_id}/events",
    response_model=list[RunEvent],
    responses={
        **documented(400, 401, 404, 422, 503),
        200: {
            "description": (
                "The durable events after `after` (JSON), or with `Accept: text/event-stream` "
                "a Server-Sent Events stream: events with their seq as id, live deltas as "
                "`event: delta`, until the run ends"
            ),
            "content": {MEDIA_TYPE: {"schema": {"type": "string"}}},
        },
    },
)
async def get_events(
    run_id: RunId,
    request: Request,
    runs: RunsDep,
    context: ContextDep,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="Only events after this seq")] = 0,
    last_event_id: Annotated[
        int | None,
        Header(alias="Last-Event-ID", ge=0, le=MAX_SEQ, description="Resume a stream after it"),
    ] = None,
    live_after: Annotated[
        int,
        Query(
            ge=0,
            le=MAX_SEQ,
            description="Stream only: send live deltas after this `live_seq` (0: all of them)",
        ),
    ] = 0,
) -> Any:
    """The run's durable events after a sequence number, as JSON or as a live stream."""
    start = max(after, last_event_id or 0)
    if not wants_stream(request.headers.get("accept")):
        return await runs.events(run_id, start)
    handle = await runs.handle(run_id)
    stream = event_stream(
        runs.client,
        handle,
        run_id,
        after=start,
        live=context.live,
        live_after=live_after,
        poll_interval=context.poll_interval,
        keepalive_interval=context.keepalive_interval,
    )
    return stream_response(stream)


async def _act(
    runs: RunsDep, run_id: str, action: c.Action, uploads: Sequence[Upload] = ()
) -> ActionResult:
    result = await runs.act(run_id, action, uploads)
    return ActionResult(
        accepted=bool(result.get("accepted", True)), status=str(result.get("status", ""))
    )


@_post_with_attachments(
    "/{run_id}/input",
    {"node_id": _TEXT, "text": _TEXT},
    ["node_id", "text"],
    response_model=ActionResult,
    responses=_ACT_ERRORS,
)
async def give_input(
    run_id: RunId, body: InputBody, runs: RunsDep, request: Request
) -> ActionResult:
    """Answer a node that awaits input (JSON, or multipart form data with files to attach)."""
    return await _act(runs, run_id, body.action(), uploads_of(request))


@router.post(
    "/{run_id}/approvals/{approval_id}", response_model=ActionResult, responses=_ACT_ERRORS
)
async def decide_approval(
    run_id: RunId,
    approval_id: Annotated[str, Path(min_length=1, max_length=1000)],
    body: ApprovalBody,
    runs: RunsDep,
    tenant: TenantDep,
) -> ActionResult:
    """Allow or deny a pending tool approval, as a whole or call by call.

    `by` is the caller's tenant when the body leaves it out."""
    return await _act(runs, run_id, body.action(approval_id, tenant))


@router.post("/{run_id}/grants/revoke", response_model=ActionResult, responses=_ACT_ERRORS)
async def revoke_grant(
    run_id: RunId, body: RevokeBody, runs: RunsDep, tenant: TenantDep
) -> ActionResult:
    """Take back a remembered approval (`remember`): matching calls ask again."""
    return await _act(runs, run_id, body.action(tenant))


@router.post("/{run_id}/retry", response_model=ActionResult, responses=_ACT_ERRORS)
async def retry_node(run_id: RunId, body: RetryBody, runs: RunsDep) -> ActionResult:
    """Retry a failed or interrupted node."""
    return await _act(runs, run_id, body.action())


@router.post("/{run_id}/budget", response_model=ActionResult, responses=_ACT_ERRORS)
async def set_budget(run_id: RunId, body: BudgetBody, runs: RunsDep) -> ActionResult:
    """Set the run's budget (`maxCostUsd`, `maxTokens`; a field left out stays as it was).

    The nodes the budget paused go on at once when the run is under it again; a budget lower
    than what is spent is taken and pauses each node at its next model call."""
    return await _act(runs, run_id, body.action())


@_post_with_attachments(
    "/{run_id}/messages",
    {"node_id": _TEXT, "text": _TEXT},
    ["node_id", "text"],
    response_model=ActionResult,
    responses=_ACT_ERRORS,
)
async def send_message(
    run_id: RunId, body: MessageBody, runs: RunsDep, request: Request
) -> ActionResult:
    """Send a live message to a node (JSON, or multipart form data with files to attach)."""
    return await _act(runs, run_id, body.action(), uploads_of(request))


@router.post(
    "/{run_id}/stop",
    status_code=202,
    response_model=RunRef,
    responses=documented(401, 404, 409, 422, 503),
)
async def stop_run(run_id: RunId, runs: RunsDep) -> RunRef:
    """Stop a live run; it ends `stopped` with a checkpoint it can resume from."""
    await runs.stop(run_id)
    return RunRef(run_id=run_id, status="stopping")


@router.post(
    "/{run_id}/resume",
    status_code=202,
    response_model=RunRef,
    responses=documented(400, 401, 404, 409, 422, 503),
)
async def resume_run(run_id: RunId, runs: RunsDep, body: ResumeBody | None = None) -> RunRef:
    """Continue a stopped or failed run from its checkpoint, as a new execution.

    With `node_id` and `message`, that node gets the message as its next user turn."""
    body = body or ResumeBody()
    await runs.resume(run_id, body.node_id, body.message)
    return RunRef(run_id=run_id, status="running")


@router.post("/{run_id}/interrupt", response_model=ActionResult, responses=_ACT_ERRORS)
async def interrupt_node(run_id: RunId, body: InterruptBody, runs: RunsDep) -> ActionResult:
    """Interrupt one running node: its model call or tool batch is cancelled."""
    return await _act(runs, run_id, body.action())


@router.post(
    "/{run_id}/batches/{batch_id}/revert",
    response_model=RevertResult,
    responses=documented(401, 404, 409, 422, 503),
)
async def revert_batch(
    run_id: RunId,
    batch_id: Annotated[str, Path(min_length=1, max_length=200)],
    runs: RunsDep,
) -> RevertResult:
    """Restore the files an edit batch changed; refused (409) when one changed since."""
    paths = await runs.revert(run_id, batch_id)
    return RevertResult(batch_id=batch_id, paths=paths)


__all__ = ["router"]
