"""`/inbox`: every input, approval and retry waiting for a person across the caller's live runs.

The runs come from Temporal's visibility: live, of the caller's tenant and the API's task queue,
with someone awaited (`OpenFlowAwaiting`). What each one waits for comes from its `state` query. A run that does not answer in time is left out
rather than holding up the whole inbox.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter
from pydantic import ValidationError
from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowExecution,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError

from openflow import contracts as c
from openflow.api.deps import ContextDep, RunsDep
from openflow.api.errors import documented
from openflow.api.models import InboxAction, InboxItem
from openflow.api.routing import StrictJsonRoute
from openflow.client import (
    SA_AWAITING,
    SA_TENANT,
    SA_WORKFLOW_ID,
    SA_WORKFLOW_NAME,
    parse_state,
    tenant_clause,
)
from openflow.engine import WorkflowRunState
from openflow.engine.events import PendingToolApproval

logger = logging.getLogger(__name__)

router = APIRouter(tags=["inbox"], route_class=StrictJsonRoute)

MAX_RUNS = 500
STATE_TIMEOUT = timedelta(seconds=3)
PARALLEL_QUERIES = 16


@router.get("/inbox", response_model=list[InboxItem], responses=documented(401, 503))
async def inbox(runs: RunsDep, context: ContextDep) -> list[InboxItem]:
    """What your live runs wait for, newest first, each with the request that settles it."""
    query = " AND ".join(
        [
            f"WorkflowType = '{_quoted(c.WORKFLOW_NAME)}'",
            "ExecutionStatus = 'Running'",
            tenant_clause(runs.tenant),
            f"TaskQueue = '{_quoted(context.task_queue)}'",
        ]
    )
    executions = [
        wf
        async for wf in runs.client.list_workflows(query, limit=MAX_RUNS)
        if wf.typed_search_attributes.get(SA_AWAITING)
    ]
    gate = asyncio.Semaphore(PARALLEL_QUERIES)
    found = await asyncio.gather(
        *(_items_of_run(runs.client, wf, runs.tenant, gate) for wf in executions)
    )
    items = [item for run_items in found for item in run_items]
    items.sort(key=lambda item: item.since_ms or 0, reverse=True)
    return items


async def _items_of_run(
    client: Client, wf: WorkflowExecution, tenant: str, gate: asyncio.Semaphore
) -> list[InboxItem]:
    if (wf.typed_search_attributes.get(SA_TENANT) or "") != tenant:
        return []
    async with gate:
        try:
            raw: dict[str, Any] = await client.get_workflow_handle(wf.id).query(
                c.QUERY_STATE, result_type=dict, rpc_timeout=STATE_TIMEOUT
            )
        except (RPCError, RPCTimeoutOrCancelledError, WorkflowQueryFailedError) as exc:
            logger.warning("inbox skips run %s: its state query failed (%s)", wf.id, exc)
            return []
        try:
            state = parse_state(raw)
        except ValidationError as exc:
            logger.warning("inbox skips run %s: its state does not parse (%s)", wf.id, exc)
            return []
    start_ms = int(wf.start_time.timestamp() * 1000) if wf.start_time else None
    base = {
        "run_id": wf.id,
        "workflow_id": wf.typed_search_attributes.get(SA_WORKFLOW_ID) or "",
        "workflow_name": wf.typed_search_attributes.get(SA_WORKFLOW_NAME) or "",
    }
    awaiting = list(wf.typed_search_attributes.get(SA_AWAITING) or [])
    return pending_items(state, base, start_ms, awaiting)


def _per_call(approval: PendingToolApproval) -> dict[str, Any]:
    """A body deciding each call of the batch, every call allowed: flip, edit, add reasons."""
    return {"decisions": [{"call_id": call.id, "allow": True} for call in approval.batch_calls()]}


def pending_items(
    state: WorkflowRunState,
    base: dict[str, str],
    start_ms: int | None = None,
    awaiting: list[str] | None = None,
) -> list[InboxItem]:
    """The inbox items of one run, each with the request that settles it.

    `awaiting` is the run's `OpenFlowAwaiting` search attribute: a node it names that the state
    shows no pause for still waits for input.
    """
    if not state.active:
        return []
    run_id = base["run_id"]
    run_path = f"/runs/{quote(run_id, safe='')}"
    labels = _labels(state)
    items: list[InboxItem] = []
    for approval in state.pending_approvals:
        node = approval.node_id
        path = f"{run_path}/approvals/{quote(approval.approval_id, safe='')}"
        items.append(
            InboxItem(
                **base,
                kind="approval",
                node_id=node,
                label=approval.node_label or labels.get(node, node),
                approval_id=approval.approval_id,
                tool_call=approval.tool_call,
                tool_calls=list(approval.tool_calls),
                tier=approval.tier,
                since_ms=_since(state, node, "paused") or start_ms,
                actions=[
                    InboxAction(label="approve", path=path, body={"allow": True}),
                    InboxAction(label="deny", path=path, body={"allow": False, "reason": ""}),
                    InboxAction(label="decide", path=path, body=_per_call(approval)),
                ],
            )
        )
    statuses = state.status_by_node
    covered = {item.node_id for item in items} | {
        node for node, status in statuses.items() if status in ("failed", "interrupted")
    }
    inputs = list(state.awaiting_node_ids)
    inputs += [n for n in awaiting or [] if n not in inputs and n not in covered and n in statuses]
    for node in inputs:
        items.append(
            InboxItem(
                **base,
                kind="input",
                node_id=node,
                label=labels.get(node, node),
                question=_question(state, node),
                structured_input=state.structured_input_by_node.get(node),
                since_ms=_since(state, node, "paused") or start_ms,
                actions=[
                    InboxAction(
                        label="answer",
                        path=f"{run_path}/input",
                        body={"node_id": node, "text": ""},
                    )
                ],
            )
        )
    subagents = {sub.id for subs in state.subagents_by_node.values() for sub in subs}
    for node, status in sorted(statuses.items()):
        if status not in ("failed", "interrupted") or node in subagents:
            continue
        error = "interrupted" if status == "interrupted" else _failure(state, node)
        items.append(
            InboxItem(
                **base,
                kind="retry",
                node_id=node,
                label=labels.get(node, node),
                error=error,
                since_ms=_since(state, node, "failed" if status == "failed" else "paused")
                or start_ms,
                actions=[
                    InboxAction(label="retry", path=f"{run_path}/retry", body={"node_id": node}),
                    *_budget_actions(run_path, error),
                ],
            )
        )
    return items


def _budget_actions(run_path: str, error: str | None) -> list[InboxAction]:
    """For a node its budget holds: the request that raises the budget (fill in the field)."""
    if not error or not error.startswith("budget reached"):
        return []
    field = "maxTokens" if "tokens spent" in error else "maxCostUsd"
    return [InboxAction(label="raise budget", path=f"{run_path}/budget", body={field: None})]


def _labels(state: WorkflowRunState) -> dict[str, str]:
    labels: dict[str, str] = {}
    for entry in state.run_trace:
        if entry.node_id and entry.node_label and entry.status in ("queued", "paused", "failed"):
            labels[entry.node_id] = entry.node_label
    return labels


def _since(state: WorkflowRunState, node: str, status: str) -> int | None:
    for entry in reversed(state.run_trace):
        if entry.node_id == node and entry.status == status:
            at = entry.at_ms
            return at if at is not None and at > 0 else None
    return None


def _question(state: WorkflowRunState, node: str) -> str | None:
    for message in reversed(state.chat_logs.get(node, [])):
        if message.role == "user":
            return None
        if message.role == "assistant" and message.content.strip():
            return message.content
    return None


def _failure(state: WorkflowRunState, node: str) -> str | None:
    for entry in reversed(state.run_trace):
        if entry.node_id == node and entry.status == "failed":
            return entry.message or None
    return state.last_error


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


__all__ = ["pending_items", "router"]
