"""The WorkflowRunState projection: what a person sees of a run (OpenFlow spec 9.2 and 9.3).

The projection is a fold over the run's events: `apply_event(state, event)` returns a new
state and never mutates its input (containers that change are copied, the rest is shared),
so the same events always give the same state. Timestamps come from the events' `at_ms`.
`model_dump(by_alias=True, mode="json")` gives the flat camelCase object of the `state`
query, with the run's `status` derived from what the events said.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Literal, assert_never

from pydantic import BaseModel, ConfigDict, Field

from openflow.engine.events import (
    Aborted,
    ActionIgnored,
    AiInvokeFailed,
    ChatLogMessage,
    ChatMessage,
    ChatMessageDelta,
    ChatRole,
    EditBatch,
    EditBatchRecorded,
    EditBatchReverted,
    Error,
    FileChanged,
    FileChangeRecord,
    Finished,
    GrantAdded,
    GrantRevoked,
    NodeAwaitingInput,
    NodeCompleted,
    NodeErrored,
    NodeFailed,
    NodeInterrupted,
    NodeQueued,
    NodeRetrying,
    NodeStarted,
    OutputRepairFailed,
    OutputRepairStarted,
    OutputRepairSucceeded,
    PendingToolApproval,
    PhaseTimed,
    RunEvent,
    RunReport,
    RunResumed,
    RunStarted,
    SubagentCompleted,
    SubagentFailed,
    SubagentsDeclared,
    SubagentStarted,
    SubagentStatus,
    SubagentSummary,
    ToolApprovalRequested,
    ToolApproved,
    ToolArtifactCreated,
    ToolCallProposed,
    ToolCompleted,
    ToolDenied,
    ToolOutcomeUnknown,
    ToolRetrying,
    ToolStarted,
    ToolUpdated,
    UsageReported,
)
from openflow.engine.request import UsageReport
from openflow.engine.review import REVIEW_NODE

AgentStatus = Literal[
    "idle",
    "queued",
    "started",
    "awaiting_input",
    "awaiting_tool_approval",
    "running_tool",
    "completed",
    "failed",
    "interrupted",
    "stopped",
]
TraceStatus = Literal["queued", "running", "paused", "failed", "stopped", "completed"]
ToolCallStatus = Literal[
    "proposed", "awaiting_approval", "running", "completed", "blocked", "failed", "aborted"
]
RunStatus = Literal["running", "paused", "stopped", "completed", "failed"]
PlanPhase = Literal["planning", "execution"]

_BUSY: frozenset[AgentStatus] = frozenset({"queued", "started", "running_tool"})
_STOPPABLE: frozenset[AgentStatus] = _BUSY | {"awaiting_input", "awaiting_tool_approval"}
_RETRYABLE: frozenset[AgentStatus] = frozenset({"failed", "interrupted"})
_LIVE_TOOL: frozenset[ToolCallStatus] = frozenset({"proposed", "running", "awaiting_approval"})
_LIVE_TRACE: frozenset[TraceStatus] = frozenset({"running", "paused", "queued"})
_UNKNOWN_OUTCOME = "outcome unknown: the run stopped while this tool was running"


class _Item(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)


class ToolCallSummary(_Item):
    """One row of a node's tool calls (spec 9.2 `toolCallsByNode`)."""

    tool_call_id: str = Field(alias="toolCallId")
    tool_name: str = Field(alias="toolName")
    status: ToolCallStatus
    arguments: dict[str, Any] = Field(default_factory=dict)
    intent: str | None = None
    last_output: str | None = Field(default=None, alias="lastOutput")
    is_error: bool = Field(default=False, alias="isError")
    streaming: bool = False
    started_at_ms: int | None = Field(default=None, alias="startedAtMs")
    completed_at_ms: int | None = Field(default=None, alias="completedAtMs")


class ToolArtifact(_Item):
    """Tool output kept in the run store (spilled output, a sealed plan)."""

    artifact_id: str = Field(alias="artifactId")
    tool_name: str = Field(alias="toolName")
    path: str
    size_bytes: int = Field(alias="sizeBytes")


class PlanModeState(_Item):
    """Plan → Execute mode: the pinned evidence source and the current phase (spec 11)."""

    evidence_source_node_id: str = Field(alias="evidenceSourceNodeId")
    phase: PlanPhase = "planning"


class TraceEntry(_Item):
    """One line of the run trace."""

    node_id: str | None = Field(default=None, alias="nodeId")
    node_label: str = Field(default="", alias="nodeLabel")
    status: TraceStatus
    message: str
    output: Any = None
    at_ms: int | None = Field(default=None, alias="atMs")


class GrantSummary(_Item):
    """A remembered approval: calls of `tool` (under `pathPrefix`) run without asking."""

    tool: str
    path_prefix: str | None = Field(default=None, alias="pathPrefix")
    node_id: str = Field(default="", alias="nodeId")
    by: str | None = None
    at_ms: int | None = Field(default=None, alias="atMs")


class Usage(_Item):
    """Tokens and estimated cost spent so far (CONTRACT 8 `usage`)."""

    input_tokens: int = Field(default=0, alias="inputTokens")
    output_tokens: int = Field(default=0, alias="outputTokens")
    cached_tokens: int = Field(default=0, alias="cachedTokens")
    cache_write_tokens: int = Field(default=0, alias="cacheWriteTokens")
    estimated_cost_usd: float = Field(default=0.0, alias="estimatedCostUsd")

    def plus(self, report: UsageReport) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + report.prompt_tokens,
            output_tokens=self.output_tokens + report.completion_tokens,
            cached_tokens=self.cached_tokens + report.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + report.cache_creation_input_tokens,
            estimated_cost_usd=round(self.estimated_cost_usd + (report.cost_usd or 0.0), 6),
        )


class RunUsage(_Item):
    """The run's spend and each node's (a subagent's counts as its node's; the post-run
    review's under its own id)."""

    run: Usage = Field(default_factory=Usage)
    by_node: dict[str, Usage] = Field(default_factory=dict, alias="byNode")


class ContextWindow(_Item):
    """How full a node's context window was at its last model call."""

    used_tokens: int = Field(default=0, alias="usedTokens")
    cached_input_tokens: int = Field(default=0, alias="cachedInputTokens")
    cache_creation_input_tokens: int = Field(default=0, alias="cacheCreationInputTokens")
    max_tokens: int = Field(default=0, alias="maxTokens")
    model: str = ""
    node_id: str = Field(alias="nodeId")


class WorkflowRunState(BaseModel):
    """The run as a person sees it (spec 9.2 plus `status`); treat it as a value."""

    model_config = ConfigDict(populate_by_name=True)

    active: bool = True
    status: RunStatus = "running"
    workflow_id: str | None = Field(default=None, alias="workflowId")
    run_id: str | None = Field(default=None, alias="runId")
    execution_cwd: str | None = Field(default=None, alias="executionCwd")
    project_id: str | None = Field(default=None, alias="projectId")
    waiting_reason: str | None = Field(default=None, alias="waitingReason")
    awaiting_node_id: str | None = Field(default=None, alias="awaitingNodeId")
    awaiting_node_ids: list[str] = Field(default_factory=list, alias="awaitingNodeIds")
    structured_input_by_node: dict[str, dict[str, Any]] = Field(
        default_factory=dict, alias="structuredInputByNode"
    )
    active_manual_node_id: str | None = Field(default=None, alias="activeManualNodeId")
    active_tool_call_id: str | None = Field(default=None, alias="activeToolCallId")
    pending_approvals: list[PendingToolApproval] = Field(
        default_factory=list, alias="pendingApprovals"
    )
    pending_mcp_client_requests: list[dict[str, Any]] = Field(
        default_factory=list, alias="pendingMcpClientRequests"
    )
    tool_calls_by_node: dict[str, list[ToolCallSummary]] = Field(
        default_factory=dict, alias="toolCallsByNode"
    )
    tool_artifacts: dict[str, ToolArtifact] = Field(default_factory=dict, alias="toolArtifacts")
    plan_mode: PlanModeState | None = Field(default=None, alias="planMode")
    exec_approval_granted: bool = Field(default=False, alias="execApprovalGranted")
    status_by_node: dict[str, AgentStatus] = Field(default_factory=dict, alias="statusByNode")
    subagents_by_node: dict[str, list[SubagentSummary]] = Field(
        default_factory=dict, alias="subagentsByNode"
    )
    last_report: RunReport | None = Field(default=None, alias="lastReport")
    last_error: str | None = Field(default=None, alias="lastError")
    chat_logs: dict[str, list[ChatLogMessage]] = Field(default_factory=dict, alias="chatLogs")
    run_trace: list[TraceEntry] = Field(default_factory=list, alias="runTrace")
    outputs: dict[str, Any] = Field(default_factory=dict)
    handoffs: dict[str, Any] = Field(default_factory=dict)
    changed_files: list[FileChangeRecord] = Field(default_factory=list, alias="changedFiles")
    changed_files_by_node: dict[str, list[FileChangeRecord]] = Field(
        default_factory=dict, alias="changedFilesByNode"
    )
    edit_batches: list[EditBatch] = Field(default_factory=list, alias="editBatches")
    context_window_by_node: dict[str, ContextWindow] = Field(
        default_factory=dict, alias="contextWindowByNode"
    )
    usage: RunUsage = Field(default_factory=RunUsage)
    #: The run's remembered approvals (CONTRACT 8, approvals per call), oldest first.
    grants: list[GrantSummary] = Field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The flat camelCase object the `state` query returns."""
        return self.model_dump(by_alias=True, mode="json")


def initial_state(
    workflow_id: str,
    run_id: str,
    node_ids: Iterable[str],
    plan_source: str | None,
    *,
    execution_cwd: str | None = None,
    project_id: str | None = None,
) -> WorkflowRunState:
    """A run before its first event: active, every node idle, planning when plan mode is on."""
    return WorkflowRunState(
        workflow_id=workflow_id,
        run_id=run_id,
        execution_cwd=execution_cwd,
        project_id=project_id,
        status_by_node=dict.fromkeys(node_ids, "idle"),
        plan_mode=(
            PlanModeState(evidence_source_node_id=plan_source, phase="planning")
            if plan_source is not None
            else None
        ),
    )


KEEP_CHAT = 200
KEEP_TRACE = 500
KEEP_TOOL_CALLS = 200
KEEP_EDIT_BATCHES = 100


def trim_state(state: WorkflowRunState) -> WorkflowRunState:
    """The state a continued execution carries: its growing lists cut to their recent ends.

    Chat logs, the trace, tool call rows and edit batches only grow; the durable events keep
    every entry, so a long run's carried state stays small enough for Temporal.
    """
    return state.model_copy(
        update={
            "chat_logs": {n: log[-KEEP_CHAT:] for n, log in state.chat_logs.items()},
            "run_trace": state.run_trace[-KEEP_TRACE:],
            "tool_calls_by_node": {
                n: rows[-KEEP_TOOL_CALLS:] for n, rows in state.tool_calls_by_node.items()
            },
            "edit_batches": state.edit_batches[-KEEP_EDIT_BATCHES:],
        }
    )


def apply_event(state: WorkflowRunState, event: RunEvent) -> WorkflowRunState:
    """The state after one more event (spec 9.3); the input state is left untouched."""
    if isinstance(event, ActionIgnored):
        # Only the trace notes it: the waiting reason and every status stay as they were.
        draft = state.model_copy()
        _trace(draft, None, "ignored action", "completed", _ignored(event), event.at_ms)
        return draft
    draft = state.model_copy()
    draft.waiting_reason = None
    _apply(draft, event)
    draft.status = _derive_status(draft)
    return draft


def _ignored(event: ActionIgnored) -> str:
    what = event.signal or str(event.action.get("kind") or "action")
    node = event.action.get("node_id")
    target = f" for {node[:80]!r}" if isinstance(node, str) and node else ""
    return f"ignored {what}{target}: {event.reason}"


def project(events: Iterable[RunEvent], initial: WorkflowRunState) -> WorkflowRunState:
    """Fold events into a state, starting from `initial`."""
    state = initial
    for event in events:
        state = apply_event(state, event)
    return state


# --- status derivation ------------------------------------------------------------------


def _derive_status(s: WorkflowRunState) -> RunStatus:
    if not s.active:
        return s.status
    statuses = s.status_by_node.values()
    if any(status in _BUSY for status in statuses):
        return "running"
    if s.awaiting_node_ids or s.pending_approvals or any(st in _RETRYABLE for st in statuses):
        return "paused"
    return "running"


# --- the rules --------------------------------------------------------------------------


def _apply(s: WorkflowRunState, event: RunEvent) -> None:
    match event:
        case RunStarted():
            _on_run_started(s, event)
        case RunResumed():
            s.active = True
        case NodeQueued():
            _set_status(s, event.node_id, "queued")
            _trace(s, event.node_id, event.label, "queued", "queued", event.at_ms)
        case NodeStarted():
            _set_status(s, event.node_id, "started")
            _trace(s, event.node_id, event.label, "running", "invoking model", event.at_ms)
            _remove_awaiting(s, event.node_id)
            _drop_approvals(s, lambda p: p.node_id == event.node_id)
            s.last_error = None
        case NodeRetrying():
            _on_node_retrying(s, event)
        case ChatMessage():
            _on_chat_message(s, event)
        case ChatMessageDelta():
            _on_chat_delta(s, event)
        case NodeAwaitingInput():
            _on_awaiting_input(s, event)
        case ToolCallProposed():
            _on_tool_proposed(s, event)
        case ToolApprovalRequested():
            _on_approval_requested(s, event.request, event.at_ms)
        case ToolApproved():
            _drop_approvals(s, lambda p: p.approval_id == event.approval_id)
            _update_tool(s, event.node_id, event.tool_call_id, event.tool_name, _approved)
            if event.by is not None or event.arguments is not None or event.grant is not None:
                _trace_decision(s, event)
        case ToolDenied():
            _on_tool_denied(s, event)
            if event.by is not None:
                _trace_decision(s, event)
        case GrantAdded():
            kept = [
                g for g in s.grants if (g.tool, g.path_prefix) != (event.tool, event.path_prefix)
            ]
            grant = GrantSummary(
                tool=event.tool,
                path_prefix=event.path_prefix,
                node_id=event.node_id,
                by=event.by,
                at_ms=event.at_ms,
            )
            s.grants = [*kept, grant]
            shown = _grant_label(event.tool, event.path_prefix)
            message = f"remembered: {shown} runs without asking" + _by(event.by)
            _trace(s, event.node_id, "approval", "completed", message, event.at_ms)
        case GrantRevoked():
            key = (event.tool, event.path_prefix)
            s.grants = [g for g in s.grants if (g.tool, g.path_prefix) != key]
            shown = _grant_label(event.tool, event.path_prefix)
            message = f"grant revoked: {shown} asks again" + _by(event.by)
            _trace(s, None, "approval", "completed", message, event.at_ms)
        case ToolStarted():
            _on_tool_started(s, event)
        case ToolRetrying():
            _set_status(s, event.node_id, "running_tool")
            message = (
                f"retrying tool {event.tool_name} "
                f"(attempt {event.attempt}, backoff {event.backoff_ms}ms)"
            )
            _trace(s, event.node_id, event.tool_name, "running", message, event.at_ms)
        case ToolUpdated():
            content = event.content
            _update_tool(
                s,
                event.node_id,
                event.tool_call_id,
                event.tool_name,
                lambda row: row.model_copy(update={"last_output": content}),
            )
        case ToolArtifactCreated():
            artifact = ToolArtifact(
                artifact_id=event.artifact_id,
                tool_name=event.tool_name,
                path=event.path,
                size_bytes=event.size_bytes,
            )
            s.tool_artifacts = {**s.tool_artifacts, event.artifact_id: artifact}
        case FileChanged():
            s.changed_files = [*s.changed_files, event.record]
            by_node = s.changed_files_by_node
            s.changed_files_by_node = {
                **by_node,
                event.node_id: [*by_node.get(event.node_id, []), event.record],
            }
        case EditBatchRecorded():
            s.edit_batches = [*s.edit_batches, event.batch]
        case EditBatchReverted():
            _on_batch_reverted(s, event)
        case ToolCompleted():
            _on_tool_completed(s, event)
        case ToolOutcomeUnknown():
            _on_tool_outcome_unknown(s, event)
        case NodeCompleted():
            _on_node_completed(s, event)
        case NodeInterrupted():
            _set_status(s, event.node_id, "interrupted")
            _trace(s, event.node_id, event.label, "paused", "interrupted by user", event.at_ms)
            _system(s, event.node_id, "Interrupted by user.", event.at_ms)
        case NodeErrored():
            _on_node_failure(s, event.node_id, event.label, event.error, event.at_ms)
        case NodeFailed():
            _on_node_failure(s, event.node_id, event.label, event.error, event.at_ms)
            _end(s, "failed")
        case Finished():
            s.last_report = event.report
            missing = {
                o.node_id: o.output for o in event.report.outputs if o.node_id not in s.outputs
            }
            if missing:
                s.outputs = {**s.outputs, **missing}
            _end(s, "completed")
        case Aborted():
            _on_aborted(s)
        case Error():
            if event.is_fatal():
                s.last_error = event.message
                _end(s, "failed")
        case SubagentsDeclared():
            _on_subagents_declared(s, event)
        case SubagentStarted():
            _set_subagent(s, event.node_id, event.subagent_id, "active")
            _system(s, event.node_id, f"Subagent {event.subagent_id} started.", event.at_ms)
        case SubagentCompleted():
            _set_subagent(s, event.node_id, event.subagent_id, "completed")
            _system(s, event.node_id, f"Subagent {event.subagent_id} completed.", event.at_ms)
        case SubagentFailed():
            _set_subagent(s, event.node_id, event.subagent_id, "failed")
            if s.status_by_node.get(event.subagent_id) in _BUSY:
                _set_status(s, event.subagent_id, "failed")
            text = f"Subagent {event.subagent_id} failed: {event.error}"
            _system(s, event.node_id, text, event.at_ms)
        case PhaseTimed():
            message = f"{event.phase}: {event.label} · {_duration(event.duration_ms)}"
            output = {"phase": event.phase, "durationMs": event.duration_ms}
            _trace(s, event.node_id, event.label, "completed", message, event.at_ms, output)
        case UsageReported():
            _on_usage(s, event)
        case OutputRepairStarted():
            message = f"repairing malformed output · {event.model}"
            _trace(s, event.node_id, "output repair", "running", message, event.at_ms)
        case OutputRepairSucceeded():
            message = f"output repaired · {event.model}"
            _trace(s, event.node_id, "output repair", "completed", message, event.at_ms)
        case OutputRepairFailed():
            message = f"output repair failed · {event.reason}"
            _trace(s, event.node_id, "output repair", "completed", message, event.at_ms)
        case AiInvokeFailed() | ActionIgnored():
            pass
        case _:
            assert_never(event)


def _on_run_started(s: WorkflowRunState, event: RunStarted) -> None:
    s.active = True
    s.status = "running"
    if event.workflow_id:
        s.workflow_id = event.workflow_id
    if event.execution_cwd:
        s.execution_cwd = event.execution_cwd
    if event.project_id:
        s.project_id = event.project_id
    if (event.entrypoint_text or event.attachments) and event.entry_node_id is not None:
        message = _message("user", event.entrypoint_text, event.at_ms)
        if event.attachments:
            message = message.model_copy(update={"attachments": event.attachments})
        _append_chat(s, event.entry_node_id, message)


def _on_node_retrying(s: WorkflowRunState, event: NodeRetrying) -> None:
    _set_status(s, event.node_id, "queued")
    message = (
        f"retrying model call in {event.backoff_ms}ms (attempt {event.attempt}): {event.error}"
    )
    _trace(s, event.node_id, event.label, "queued", message, event.at_ms)
    name = event.label or event.node_id
    s.waiting_reason = f"{name}: retrying in {_duration(event.backoff_ms)} after: {event.error}"


def _on_chat_message(s: WorkflowRunState, event: ChatMessage) -> None:
    log = s.chat_logs.get(event.node_id, [])
    index = _message_index(log, event.message_id)
    if index is not None:
        update = {"content": event.content, "streaming": False, "completed_at_ms": event.at_ms}
        _replace_chat(s, event.node_id, index, log[index].model_copy(update=update))
    else:
        message = ChatLogMessage(
            role=event.role,
            content=event.content,
            attachments=event.attachments,
            id=event.message_id,
            tool_call_id=event.tool_call_id,
            message_kind=event.message_kind,
            created_at_ms=event.at_ms,
            completed_at_ms=event.at_ms,
        )
        _append_chat(s, event.node_id, message)
    if event.role == "user" and event.node_id in s.awaiting_node_ids:
        _remove_awaiting(s, event.node_id)
        _set_status(s, event.node_id, "started")


def _on_chat_delta(s: WorkflowRunState, event: ChatMessageDelta) -> None:
    log = s.chat_logs.get(event.node_id, [])
    index = _message_index(log, event.message_id)
    completed = event.at_ms if event.finalize else None
    if index is None:
        message = ChatLogMessage(
            role=event.role,
            content=event.delta,
            id=event.message_id,
            streaming=not event.finalize,
            created_at_ms=event.at_ms,
            completed_at_ms=completed,
        )
        _append_chat(s, event.node_id, message)
        return
    current = log[index]
    update: dict[str, Any] = {"content": current.content + event.delta}
    if event.finalize:
        update.update(streaming=False, completed_at_ms=completed)
    _replace_chat(s, event.node_id, index, current.model_copy(update=update))


def _on_awaiting_input(s: WorkflowRunState, event: NodeAwaitingInput) -> None:
    node = event.node_id
    _set_status(s, node, "awaiting_input")
    _trace(s, node, event.label, "paused", "paused for human input", event.at_ms)
    if node not in s.awaiting_node_ids:
        s.awaiting_node_ids = [*s.awaiting_node_ids, node]
    s.awaiting_node_id = s.awaiting_node_ids[0]
    s.active_manual_node_id = node
    questions = {k: v for k, v in s.structured_input_by_node.items() if k != node}
    if event.structured_input is not None:
        questions[node] = event.structured_input
    s.structured_input_by_node = questions


def _on_tool_proposed(s: WorkflowRunState, event: ToolCallProposed) -> None:
    call = event.tool_call
    if _tool_index(s, event.node_id, call.id) is not None:
        return
    row = _new_row(call.id, call.name, "proposed", call.arguments)
    s.tool_calls_by_node = {
        **s.tool_calls_by_node,
        event.node_id: [*s.tool_calls_by_node.get(event.node_id, []), row],
    }
    marker = _message("thinking", "", event.at_ms).model_copy(update={"tool_call_id": call.id})
    _append_chat(s, event.node_id, marker)


def _on_approval_requested(s: WorkflowRunState, request: PendingToolApproval, at: int) -> None:
    if any(p.approval_id == request.approval_id for p in s.pending_approvals):
        return
    node = request.node_id
    tool = request.tool_call.name
    _set_status(s, node, "awaiting_tool_approval")
    _trace(s, node, request.node_label, "paused", f"awaiting approval for {tool}", at)
    _remove_awaiting(s, node)
    s.pending_approvals = [*s.pending_approvals, request]
    _system(s, node, f"Approval required for tool '{tool}'.", at)
    for call in request.batch_calls():
        if _tool_index(s, node, call.id) is None:
            row = _new_row(call.id, call.name, "awaiting_approval", call.arguments)
            s.tool_calls_by_node = {
                **s.tool_calls_by_node,
                node: [*s.tool_calls_by_node.get(node, []), row],
            }
        else:
            _update_tool(s, node, call.id, call.name, _awaiting_approval)


def _on_tool_denied(s: WorkflowRunState, event: ToolDenied) -> None:
    _drop_approvals(s, lambda p: p.approval_id == event.approval_id)
    update = {
        "status": "blocked",
        "last_output": event.reason,
        "is_error": True,
        "streaming": False,
        "completed_at_ms": event.at_ms,
    }
    _update_tool(
        s,
        event.node_id,
        event.tool_call_id,
        event.tool_name,
        lambda row: row.model_copy(update=update),
    )
    _restore_status(s, event.node_id, event.tool_call_id)


def _on_tool_started(s: WorkflowRunState, event: ToolStarted) -> None:
    at = event.at_ms
    arguments = event.arguments

    def started(row: ToolCallSummary) -> ToolCallSummary:
        update: dict[str, Any] = {
            "status": "running",
            "started_at_ms": at,
            "streaming": event.tool_name == "bash",
        }
        if arguments:
            update["arguments"] = arguments
        return row.model_copy(update=update)

    _update_tool(s, event.node_id, event.tool_call_id, event.tool_name, started)
    _set_status(s, event.node_id, "running_tool")
    message = f"running tool {event.tool_name}"
    _trace(s, event.node_id, event.tool_name, "running", message, at)
    s.active_tool_call_id = event.tool_call_id


def _on_tool_completed(s: WorkflowRunState, event: ToolCompleted) -> None:
    def completed(row: ToolCallSummary) -> ToolCallSummary:
        status: ToolCallStatus = "failed" if event.is_error else "completed"
        if row.status in ("blocked", "aborted"):
            status = row.status
        update = {
            "status": status,
            "last_output": event.content,
            "is_error": event.is_error,
            "streaming": False,
            "completed_at_ms": event.at_ms,
        }
        return row.model_copy(update=update)

    _update_tool(s, event.node_id, event.tool_call_id, event.tool_name, completed)
    _restore_status(s, event.node_id, event.tool_call_id)
    if s.active_tool_call_id == event.tool_call_id:
        s.active_tool_call_id = None


def _on_tool_outcome_unknown(s: WorkflowRunState, event: ToolOutcomeUnknown) -> None:
    update = {
        "status": "failed",
        "last_output": _UNKNOWN_OUTCOME,
        "is_error": True,
        "streaming": False,
        "completed_at_ms": event.at_ms,
    }
    _update_tool(
        s,
        event.node_id,
        event.tool_call_id,
        event.tool_name,
        lambda row: row.model_copy(update=update),
    )
    text = (
        f"Tool '{event.tool_name}' may or may not have run: the run stopped while it was "
        "running. Check its effects before retrying."
    )
    _system(s, event.node_id, text, event.at_ms)


def _on_node_completed(s: WorkflowRunState, event: NodeCompleted) -> None:
    node = event.node_id
    _set_status(s, node, "completed")
    _trace(s, node, event.label, "completed", "completed", event.at_ms, event.output)
    _remove_awaiting(s, node)
    s.outputs = {**s.outputs, node: event.output}
    if event.handoff is not None:
        s.handoffs = {**s.handoffs, node: event.handoff}
    content = json.dumps(event.output, separators=(",", ":"), ensure_ascii=False, default=str)
    message = _message("assistant", content, event.at_ms).model_copy(
        update={"message_kind": "node_completed"}
    )
    _append_chat(s, node, message)
    plan = s.plan_mode
    if plan is not None and plan.evidence_source_node_id == node and plan.phase == "planning":
        s.plan_mode = plan.model_copy(update={"phase": "execution"})


def _on_node_failure(s: WorkflowRunState, node: str, label: str, error: str, at: int) -> None:
    _set_status(s, node, "failed")
    _trace(s, node, label, "failed", error, at)
    s.last_error = error
    _system(s, node, f"Failed: {error}", at)


def _on_aborted(s: WorkflowRunState) -> None:
    busy = next((n for n, status in s.status_by_node.items() if status in _STOPPABLE), None)
    if busy is not None:
        _set_status(s, busy, "stopped")
        trace = s.run_trace
        for index in range(len(trace) - 1, -1, -1):
            entry = trace[index]
            if entry.node_id == busy and entry.status in _LIVE_TRACE:
                stopped = entry.model_copy(update={"status": "stopped", "message": "Stopped"})
                s.run_trace = [*trace[:index], stopped, *trace[index + 1 :]]
                break
    s.tool_calls_by_node = {
        node: [
            row.model_copy(update={"status": "aborted", "streaming": False})
            if row.status in _LIVE_TOOL
            else row
            for row in rows
        ]
        for node, rows in s.tool_calls_by_node.items()
    }
    _end(s, "stopped")


def _on_subagents_declared(s: WorkflowRunState, event: SubagentsDeclared) -> None:
    known = list(s.subagents_by_node.get(event.node_id, []))
    for summary in event.summaries:
        index = next((i for i, item in enumerate(known) if item.id == summary.id), None)
        if index is None:
            known.append(summary)
        else:
            known[index] = summary
    s.subagents_by_node = {**s.subagents_by_node, event.node_id: known}
    _system(s, event.node_id, f"Registered {len(event.summaries)} subagent(s).", event.at_ms)


def _on_usage(s: WorkflowRunState, event: UsageReported) -> None:
    owner = next(
        (
            node
            for node, subagents in sorted(s.subagents_by_node.items())
            if any(sub.id == event.node_id for sub in subagents)
        ),
        event.node_id,
    )
    by_node = s.usage.by_node
    s.usage = RunUsage(
        run=s.usage.run.plus(event.usage),
        by_node={**by_node, owner: by_node.get(owner, Usage()).plus(event.usage)},
    )
    if event.node_id == REVIEW_NODE:
        return
    window = ContextWindow(
        used_tokens=event.usage.total_tokens,
        cached_input_tokens=event.usage.cached_input_tokens,
        cache_creation_input_tokens=event.usage.cache_creation_input_tokens,
        max_tokens=event.max_context_tokens or 0,
        model=event.model,
        node_id=event.node_id,
    )
    s.context_window_by_node = {**s.context_window_by_node, event.node_id: window}


# --- helpers (each replaces the containers it changes, never mutates them) -------------


def _set_status(s: WorkflowRunState, node: str, status: AgentStatus) -> None:
    s.status_by_node = {**s.status_by_node, node: status}


def _on_batch_reverted(s: WorkflowRunState, event: EditBatchReverted) -> None:
    """A reverted batch leaves the edit batches and the changed files; a refusal only the trace."""
    label = event.label
    if event.error is not None:
        message = f"revert of edit batch {event.batch_id} refused: {event.error}"
        _trace(s, event.node_id, label, "paused", message, event.at_ms)
        return
    s.edit_batches = [b for b in s.edit_batches if b.batch_id != event.batch_id]
    s.changed_files = [r for r in s.changed_files if r.batch_id != event.batch_id]
    s.changed_files_by_node = {
        node: [r for r in records if r.batch_id != event.batch_id]
        for node, records in s.changed_files_by_node.items()
    }
    message = f"reverted edit batch {event.batch_id}: {', '.join(event.paths) or 'no files'}"
    _trace(s, event.node_id, label, "completed", message, event.at_ms)


def _trace(
    s: WorkflowRunState,
    node: str | None,
    label: str,
    status: TraceStatus,
    message: str,
    at: int,
    output: Any = None,
) -> None:
    entry = TraceEntry(
        node_id=node, node_label=label, status=status, message=message, output=output, at_ms=at
    )
    s.run_trace = [*s.run_trace, entry]


def _message(role: ChatRole, text: str, at: int) -> ChatLogMessage:
    return ChatLogMessage(role=role, content=text, created_at_ms=at, completed_at_ms=at)


def _system(s: WorkflowRunState, node: str, text: str, at: int) -> None:
    _append_chat(s, node, _message("system", text, at))


def _append_chat(s: WorkflowRunState, node: str, message: ChatLogMessage) -> None:
    log = s.chat_logs.get(node, [])
    previous = log[-1].created_at_ms if log else None
    if previous is not None and message.created_at_ms is not None:
        elapsed = max(message.created_at_ms - previous, 0)
        message = message.model_copy(update={"elapsed_since_previous_ms": elapsed})
    s.chat_logs = {**s.chat_logs, node: [*log, message]}


def _replace_chat(s: WorkflowRunState, node: str, index: int, message: ChatLogMessage) -> None:
    log = s.chat_logs[node]
    s.chat_logs = {**s.chat_logs, node: [*log[:index], message, *log[index + 1 :]]}


def _message_index(log: list[ChatLogMessage], message_id: str | None) -> int | None:
    if message_id is None:
        return None
    return next((i for i, m in enumerate(log) if m.id == message_id), None)


def _remove_awaiting(s: WorkflowRunState, node: str) -> None:
    if node in s.awaiting_node_ids:
        s.awaiting_node_ids = [n for n in s.awaiting_node_ids if n != node]
        s.awaiting_node_id = s.awaiting_node_ids[0] if s.awaiting_node_ids else None
        if s.active_manual_node_id == node:
            s.active_manual_node_id = s.awaiting_node_ids[-1] if s.awaiting_node_ids else None
    if node in s.structured_input_by_node:
        s.structured_input_by_node = {
            k: v for k, v in s.structured_input_by_node.items() if k != node
        }


def _drop_approvals(s: WorkflowRunState, matches: Callable[[PendingToolApproval], bool]) -> None:
    if any(matches(p) for p in s.pending_approvals):
        s.pending_approvals = [p for p in s.pending_approvals if not matches(p)]


def _end(s: WorkflowRunState, status: RunStatus) -> None:
    """The run is no longer live: nobody is awaited and nothing is pending."""
    s.active = False
    s.status = status
    s.awaiting_node_id = None
    s.awaiting_node_ids = []
    s.structured_input_by_node = {}
    s.active_manual_node_id = None
    s.active_tool_call_id = None
    s.pending_approvals = []
    s.pending_mcp_client_requests = []


def _restore_status(s: WorkflowRunState, node: str, finished_call_id: str) -> None:
    """After a tool call ends or is denied, show what the node is doing now."""
    if s.status_by_node.get(node) not in ("running_tool", "awaiting_tool_approval"):
        return
    others_running = any(
        row.status == "running" and row.started_at_ms is not None
        for row in s.tool_calls_by_node.get(node, [])
        if row.tool_call_id != finished_call_id
    )
    if node in s.awaiting_node_ids:
        _set_status(s, node, "awaiting_input")
    elif any(p.node_id == node for p in s.pending_approvals):
        _set_status(s, node, "awaiting_tool_approval")
    elif others_running:
        _set_status(s, node, "running_tool")
    else:
        _set_status(s, node, "started")


def _new_row(
    call_id: str, name: str, status: ToolCallStatus, arguments: dict[str, Any]
) -> ToolCallSummary:
    intent = arguments.get("_i", arguments.get("intent"))
    return ToolCallSummary(
        tool_call_id=call_id,
        tool_name=name,
        status=status,
        arguments=arguments,
        intent=intent if isinstance(intent, str) else None,
    )


def _tool_index(s: WorkflowRunState, node: str, call_id: str) -> int | None:
    rows = s.tool_calls_by_node.get(node, [])
    return next((i for i, row in enumerate(rows) if row.tool_call_id == call_id), None)


def _update_tool(
    s: WorkflowRunState,
    node: str,
    call_id: str,
    name: str,
    change: Callable[[ToolCallSummary], ToolCallSummary],
) -> None:
    """Change one tool call row, adding it first when no proposal was seen."""
    rows = s.tool_calls_by_node.get(node, [])
    index = _tool_index(s, node, call_id)
    if index is None:
        row = change(_new_row(call_id, name, "proposed", {}))
        s.tool_calls_by_node = {**s.tool_calls_by_node, node: [*rows, row]}
    else:
        row = change(rows[index])
        s.tool_calls_by_node = {
            **s.tool_calls_by_node,
            node: [*rows[:index], row, *rows[index + 1 :]],
        }


def _grant_label(tool: str, prefix: str | None) -> str:
    return tool if prefix is None else f"{tool} under {prefix}"


def _by(by: str | None) -> str:
    return f" · by {by}" if by else ""


def _trace_decision(s: WorkflowRunState, event: ToolApproved | ToolDenied) -> None:
    """A run trace line for a decision that names who made it, an edit or a grant."""
    if isinstance(event, ToolDenied):
        message = f"denied {event.tool_name} ({event.tool_call_id}): {event.reason}"
    elif event.grant is not None:
        message = f"approved {event.tool_name} ({event.tool_call_id}) by grant {event.grant}"
    else:
        edited = " with edited arguments" if event.arguments is not None else ""
        message = f"approved {event.tool_name} ({event.tool_call_id}){edited}"
    output = (
        {"arguments": event.arguments}
        if isinstance(event, ToolApproved) and event.arguments
        else None
    )
    _trace(s, event.node_id, "approval", "completed", message + _by(event.by), event.at_ms, output)


def _approved(row: ToolCallSummary) -> ToolCallSummary:
    if row.status in ("proposed", "awaiting_approval"):
        return row.model_copy(update={"status": "running"})
    return row


def _awaiting_approval(row: ToolCallSummary) -> ToolCallSummary:
    if row.status == "proposed":
        return row.model_copy(update={"status": "awaiting_approval"})
    return row


def _set_subagent(s: WorkflowRunState, node: str, subagent_id: str, status: SubagentStatus) -> None:
    known = s.subagents_by_node.get(node, [])
    index = next((i for i, item in enumerate(known) if item.id == subagent_id), None)
    if index is None:
        updated = [*known, SubagentSummary(id=subagent_id, name=subagent_id, status=status)]
    else:
        changed = known[index].model_copy(update={"status": status})
        updated = [*known[:index], changed, *known[index + 1 :]]
    s.subagents_by_node = {**s.subagents_by_node, node: updated}


def _duration(ms: int) -> str:
    return f"{ms}ms" if ms < 1000 else f"{ms / 1000:.1f}s"


__all__ = [
    "trim_state",
    "AgentStatus",
    "ContextWindow",
    "PlanModeState",
    "PlanPhase",
    "RunStatus",
    "SubagentStatus",
    "ToolArtifact",
    "ToolCallStatus",
    "ToolCallSummary",
    "TraceEntry",
    "TraceStatus",
    "WorkflowRunState",
    "apply_event",
    "initial_state",
    "project",
]
