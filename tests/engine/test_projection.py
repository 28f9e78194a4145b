"""The run state a person sees, rebuilt from run events (OpenFlow spec 9.2 and 9.3)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from openflow.engine.events import (
    Aborted,
    ActionIgnored,
    AiInvokeFailed,
    ChatMessage,
    ChatMessageDelta,
    EditBatch,
    EditBatchRecorded,
    Error,
    FileChanged,
    FileChangeRecord,
    Finished,
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
    ReportOutput,
    RunEvent,
    RunReport,
    RunResumed,
    RunStarted,
    SubagentCompleted,
    SubagentFailed,
    SubagentsDeclared,
    SubagentStarted,
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
    UsageReport,
    UsageReported,
    stamped,
)
from openflow.engine.projection import (
    WorkflowRunState,
    apply_event,
    initial_state,
    project,
)
from openflow.engine.transcript import ToolCall

NODES = ("plan", "build")


def fresh(plan_source: str | None = None) -> WorkflowRunState:
    return initial_state("wf-1", "run-1", NODES, plan_source)


def run(*events: Any, start: WorkflowRunState | None = None) -> WorkflowRunState:
    """Project events as the run log would hold them: numbered, one second apart."""
    numbered = [stamped(e, seq=i + 1, at_ms=1000 * (i + 1)) for i, e in enumerate(events)]
    return project(numbered, start if start is not None else fresh())


def trace(state: WorkflowRunState) -> list[tuple[str | None, str, str]]:
    return [(t.node_id, t.status, t.message) for t in state.run_trace]


def chat(state: WorkflowRunState, node: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in state.chat_logs.get(node, [])]


def row(state: WorkflowRunState, node: str, call_id: str) -> dict[str, Any]:
    [found] = [r for r in state.tool_calls_by_node[node] if r.tool_call_id == call_id]
    return found.model_dump(by_alias=True, mode="json")


WRITE = ToolCall(id="call-1", name="write", arguments={"path": "a.txt", "_i": "save notes"})
READ = ToolCall(id="call-2", name="read", arguments={"path": "b.txt"})
BASH = ToolCall(id="call-3", name="bash", arguments={"command": "make"})


def approval(approval_id: str = "ap-1", calls: tuple[ToolCall, ...] = (WRITE,)) -> Any:
    request = PendingToolApproval(
        approval_id=approval_id,
        node_id="plan",
        node_label="Plan",
        tool_call=calls[0],
        tool_calls=calls,
    )
    return ToolApprovalRequested(request=request)


def started(node: str = "plan", label: str = "Plan") -> list[Any]:
    return [NodeQueued(node_id=node, label=label), NodeStarted(node_id=node, label=label)]


# --- initial state and JSON shape -------------------------------------------------------


def test_initial_state_is_active_with_every_node_idle() -> None:
    state = fresh()
    assert state.active is True
    assert state.status == "running"
    assert state.status_by_node == {"plan": "idle", "build": "idle"}
    assert state.plan_mode is None
    assert (state.workflow_id, state.run_id) == ("wf-1", "run-1")


def test_plan_mode_starts_in_planning() -> None:
    state = fresh(plan_source="plan")
    assert state.as_json()["planMode"] == {"evidenceSourceNodeId": "plan", "phase": "planning"}


def test_state_is_one_flat_camel_case_json_object() -> None:
    state = run(*started(), ToolCallProposed(node_id="plan", label="Plan", tool_call=WRITE))
    payload = state.as_json()
    json.dumps(payload)
    for key in (
        "active",
        "status",
        "workflowId",
        "runId",
        "executionCwd",
        "projectId",
        "waitingReason",
        "awaitingNodeId",
        "awaitingNodeIds",
        "structuredInputByNode",
        "activeManualNodeId",
        "activeToolCallId",
        "pendingApprovals",
        "pendingMcpClientRequests",
        "toolCallsByNode",
        "toolArtifacts",
        "planMode",
        "execApprovalGranted",
        "statusByNode",
        "subagentsByNode",
        "lastReport",
        "lastError",
        "chatLogs",
        "runTrace",
        "outputs",
        "handoffs",
        "changedFiles",
        "changedFilesByNode",
        "editBatches",
        "contextWindowByNode",
    ):
        assert key in payload, key
    assert payload["toolCallsByNode"]["plan"][0]["toolCallId"] == "call-1"
    assert payload["runTrace"][0]["nodeLabel"] == "Plan"
    assert payload["chatLogs"]["plan"][0]["toolCallId"] == "call-1"
    assert WorkflowRunState.model_validate(payload).as_json() == payload


# --- node lifecycle ---------------------------------------------------------------------


def test_queued_then_started_shows_the_node_invoking_its_model() -> None:
    state = run(NodeQueued(node_id="plan", label="Plan"))
    assert state.status_by_node["plan"] == "queued"
    state = run(*started())
    assert state.status_by_node["plan"] == "started"
    assert trace(state) == [("plan", "queued", "queued"), ("plan", "running", "invoking model")]
    assert state.status == "running"


def test_run_started_puts_the_entrypoint_on_the_first_node() -> None:
    state = run(
        RunStarted(
            workflow_id="wf-1",
            workflow_name="Demo",
            entrypoint_text="ship it",
            entry_node_id="plan",
        )
    )
    assert chat(state, "plan") == [("user", "ship it")]
    assert state.chat_logs["plan"][0].created_at_ms == 1000


def test_awaiting_input_pauses_the_run_with_the_question() -> None:
    question = {"questions": [{"question": "Which color?", "options": ["red", "blue"]}]}
    state = run(
        *started(),
        NodeAwaitingInput(node_id="plan", label="Plan", context="ctx", structured_input=question),
    )
    assert state.status_by_node["plan"] == "awaiting_input"
    assert state.awaiting_node_ids == ["plan"]
    assert state.awaiting_node_id == "plan"
    assert state.active_manual_node_id == "plan"
    assert state.structured_input_by_node == {"plan": question}
    assert trace(state)[-1] == ("plan", "paused", "paused for human input")
    assert state.status == "paused"


def test_a_person_answering_resumes_the_node() -> None:
    state = run(
        *started(),
        NodeAwaitingInput(node_id="plan", label="Plan", structured_input={"questions": []}),
        ChatMessage(node_id="plan", role="user", content="blue"),
    )
    assert chat(state, "plan") == [("user", "blue")]
    assert state.awaiting_node_ids == []
    assert state.awaiting_node_id is None
    assert state.structured_input_by_node == {}
    assert state.status_by_node["plan"] == "started"
    assert state.status == "running"


def test_a_new_model_call_clears_the_nodes_pause_and_last_error() -> None:
    state = run(
        *started(),
        NodeErrored(node_id="plan", label="Plan", error="permanent: bad key"),
        NodeAwaitingInput(node_id="plan", label="Plan"),
        approval(),
        *started(),
    )
    assert state.awaiting_node_ids == []
    assert state.pending_approvals == []
    assert state.last_error is None
    assert state.status_by_node["plan"] == "started"


def test_completion_records_output_handoff_and_a_chat_message() -> None:
    handoff = {"format": "json", "uri": "run://handoffs/plan/HANDOFF.json"}
    output = {"summary": "plan ready", "steps": ["é", 2]}
    state = run(
        *started(), NodeCompleted(node_id="plan", label="Plan", output=output, handoff=handoff)
    )
    assert state.status_by_node["plan"] == "completed"
    assert state.outputs == {"plan": output}
    assert state.handoffs == {"plan": handoff}
    assert trace(state)[-1] == ("plan", "completed", "completed")
    assert state.run_trace[-1].output == output
    last = state.chat_logs["plan"][-1]
    assert last.role == "assistant"
    assert last.message_kind == "node_completed"
    assert last.content == '{"summary":"plan ready","steps":["é",2]}'


def test_plan_source_completion_moves_plan_mode_to_execution() -> None:
    start = fresh(plan_source="plan")
    state = run(*started("build", "Build"), NodeCompleted(node_id="build", output={}), start=start)
    assert state.plan_mode is not None and state.plan_mode.phase == "planning"
    state = run(*started(), NodeCompleted(node_id="plan", output={"summary": "x"}), start=start)
    assert state.plan_mode is not None and state.plan_mode.phase == "execution"


def test_interrupt_pauses_the_node_for_a_retry() -> None:
    state = run(*started(), NodeInterrupted(node_id="plan", label="Plan"))
    assert state.status_by_node["plan"] == "interrupted"
    assert trace(state)[-1] == ("plan", "paused", "interrupted by user")
    assert chat(state, "plan")[-1] == ("system", "Interrupted by user.")
    assert state.status == "paused"


def test_node_errored_is_a_retryable_pause_and_the_run_stays_active() -> None:
    state = run(*started(), NodeErrored(node_id="plan", label="Plan", error="permanent: 401"))
    assert state.status_by_node["plan"] == "failed"
    assert trace(state)[-1] == ("plan", "failed", "permanent: 401")
    assert state.last_error == "permanent: 401"
    assert chat(state, "plan")[-1] == ("system", "Failed: permanent: 401")
    assert state.active is True
    assert state.status == "paused"


def test_node_failed_ends_the_run_as_failed() -> None:
    state = run(
        *started(),
        NodeAwaitingInput(node_id="build", label="Build"),
        NodeFailed(node_id="plan", label="Plan", error="no model configured"),
    )
    assert state.status_by_node["plan"] == "failed"
    assert state.last_error == "no model configured"
    assert state.active is False
    assert state.status == "failed"
    assert state.awaiting_node_ids == []


def test_transient_retry_shows_why_the_run_is_waiting() -> None:
    state = run(
        *started(),
        NodeRetrying(node_id="plan", label="Plan", attempt=2, backoff_ms=2000, error="503"),
    )
    assert state.status_by_node["plan"] == "queued"
    assert state.waiting_reason == "Plan: retrying in 2.0s after: 503"
    assert trace(state)[-1] == ("plan", "queued", "retrying model call in 2000ms (attempt 2): 503")
    assert state.status == "running"
    assert (
        run(
            *started(),
            NodeRetrying(node_id="plan", label="Plan", attempt=2, backoff_ms=2000, error="503"),
            NodeQueued(node_id="plan", label="Plan", model_attempt=3),
        ).waiting_reason
        is None
    )


def test_model_errors_alone_change_nothing_a_person_sees() -> None:
    before = run(*started())
    after = run(*started(), AiInvokeFailed(node_id="plan", label="Plan", error="503"))
    assert after.as_json() == before.as_json()


# --- chat -------------------------------------------------------------------------------


def test_chat_messages_carry_times_and_the_gap_since_the_previous_one() -> None:
    state = run(
        ChatMessage(node_id="plan", role="user", content="hi"),
        AiInvokeFailed(node_id="plan", error="x"),
        ChatMessage(node_id="plan", role="assistant", content="hello"),
    )
    first, second = state.chat_logs["plan"]
    assert (first.created_at_ms, first.elapsed_since_previous_ms) == (1000, None)
    assert (second.created_at_ms, second.elapsed_since_previous_ms) == (3000, 2000)


def test_streamed_deltas_build_one_message_that_finalizes() -> None:
    state = run(
        ChatMessageDelta(node_id="plan", message_id="m-1", delta="Hel"),
        ChatMessageDelta(node_id="plan", message_id="m-1", delta="lo"),
    )
    [message] = state.chat_logs["plan"]
    assert (message.content, message.streaming, message.id) == ("Hello", True, "m-1")
    state = run(
        ChatMessageDelta(node_id="plan", message_id="m-1", delta="Hel"),
        ChatMessageDelta(node_id="plan", message_id="m-1", delta="lo"),
        ChatMessageDelta(node_id="plan", message_id="m-1", finalize=True),
    )
    [message] = state.chat_logs["plan"]
    assert (message.content, message.streaming, message.completed_at_ms) == ("Hello", False, 3000)


def test_a_whole_message_with_a_streamed_id_replaces_it_instead_of_duplicating() -> None:
    state = run(
        ChatMessageDelta(node_id="plan", message_id="m-1", delta="Hel"),
        ChatMessage(node_id="plan", role="assistant", content="Hello!", message_id="m-1"),
    )
    assert chat(state, "plan") == [("assistant", "Hello!")]
    assert state.chat_logs["plan"][0].streaming is False


# --- tools and approvals ----------------------------------------------------------------


def test_proposed_tool_call_adds_one_row_and_one_marker_even_when_proposed_twice() -> None:
    proposal = ToolCallProposed(node_id="plan", label="Plan", tool_call=WRITE)
    state = run(*started(), proposal, proposal)
    assert len(state.tool_calls_by_node["plan"]) == 1
    assert row(state, "plan", "call-1")["status"] == "proposed"
    assert row(state, "plan", "call-1")["intent"] == "save notes"
    markers = [m for m in state.chat_logs["plan"] if m.tool_call_id == "call-1"]
    assert [(m.role, m.content) for m in markers] == [("thinking", "")]


def test_approval_request_pauses_the_node_and_asks_once() -> None:
    state = run(
        *started(),
        NodeAwaitingInput(node_id="plan", label="Plan"),
        ToolCallProposed(node_id="plan", label="Plan", tool_call=WRITE),
        approval(calls=(WRITE, READ)),
        approval(calls=(WRITE, READ)),
    )
    assert state.status_by_node["plan"] == "awaiting_tool_approval"
    assert [p.approval_id for p in state.pending_approvals] == ["ap-1"]
    assert state.awaiting_node_ids == []
    assert trace(state)[-1] == ("plan", "paused", "awaiting approval for write")
    notices = [c for c in chat(state, "plan") if c[0] == "system"]
    assert notices == [("system", "Approval required for tool 'write'.")]
    assert row(state, "plan", "call-1")["status"] == "awaiting_approval"
    assert row(state, "plan", "call-2")["status"] == "awaiting_approval"
    assert state.status == "paused"
    payload = state.as_json()["pendingApprovals"][0]
    assert payload["approvalId"] == "ap-1"
    assert [c["id"] for c in payload["toolCalls"]] == ["call-1", "call-2"]


def test_approved_tool_runs_and_completes() -> None:
    state = run(
        *started(),
        ToolCallProposed(node_id="plan", label="Plan", tool_call=WRITE),
        approval(),
        ToolApproved(approval_id="ap-1", node_id="plan", tool_call_id="call-1", tool_name="write"),
    )
    assert state.pending_approvals == []
    assert row(state, "plan", "call-1")["status"] == "running"
    assert state.status == "running"
    state = run(
        *started(),
        ToolCallProposed(node_id="plan", label="Plan", tool_call=WRITE),
        approval(),
        ToolApproved(approval_id="ap-1", node_id="plan", tool_call_id="call-1", tool_name="write"),
        ToolStarted(
            node_id="plan", tool_call_id="call-1", tool_name="write", arguments=WRITE.arguments
        ),
    )
    assert state.status_by_node["plan"] == "running_tool"
    assert state.active_tool_call_id == "call-1"
    assert (state.run_trace[-1].node_label, state.run_trace[-1].message) == (
        "write",
        "running tool write",
    )
    state = run(
        *started(),
        ToolCallProposed(node_id="plan", label="Plan", tool_call=WRITE),
        ToolStarted(node_id="plan", tool_call_id="call-1", tool_name="write"),
        ToolCompleted(node_id="plan", tool_call_id="call-1", tool_name="write", content="ok"),
    )
    finished = row(state, "plan", "call-1")
    assert finished["status"] == "completed"
    assert finished["lastOutput"] == "ok"
    assert (finished["startedAtMs"], finished["completedAtMs"]) == (4000, 5000)
    assert finished["arguments"] == WRITE.arguments
    assert state.status_by_node["plan"] == "started"
    assert state.active_tool_call_id is None


def test_failed_tool_shows_its_error() -> None:
    state = run(
        *started(),
        ToolStarted(node_id="plan", tool_call_id="call-2", tool_name="read"),
        ToolCompleted(
            node_id="plan",
            tool_call_id="call-2",
            tool_name="read",
            content="[not_found]",
            is_error=True,
        ),
    )
    failed = row(state, "plan", "call-2")
    assert (failed["status"], failed["isError"], failed["lastOutput"]) == (
        "failed",
        True,
        "[not_found]",
    )


def test_denied_tool_is_blocked_with_the_reason_and_the_node_resumes() -> None:
    state = run(
        *started(),
        ToolCallProposed(node_id="plan", label="Plan", tool_call=WRITE),
        approval(),
        ToolDenied(
            approval_id="ap-1",
            node_id="plan",
            tool_call_id="call-1",
            tool_name="write",
            reason="not now",
        ),
        ToolCompleted(
            node_id="plan",
            tool_call_id="call-1",
            tool_name="write",
            content="Tool call denied by the user. Reason: not now.",
            is_error=True,
        ),
    )
    denied = row(state, "plan", "call-1")
    assert denied["status"] == "blocked"
    assert denied["isError"] is True
    assert denied["lastOutput"].startswith("Tool call denied by the user.")
    assert state.pending_approvals == []
    assert state.status_by_node["plan"] == "started"
    assert state.status == "running"


def test_denial_restores_a_node_still_waiting_on_another_batch() -> None:
    state = run(
        *started(),
        approval("ap-1", (WRITE,)),
        approval("ap-2", (BASH,)),
        ToolDenied(approval_id="ap-1", node_id="plan", tool_call_id="call-1", tool_name="write"),
    )
    assert state.status_by_node["plan"] == "awaiting_tool_approval"
    assert [p.approval_id for p in state.pending_approvals] == ["ap-2"]


def test_parallel_tools_keep_the_node_running_until_the_last_one_ends() -> None:
    other = ToolCall(id="call-4", name="read", arguments={"path": "c.txt"})
    state = run(
        *started(),
        ToolStarted(node_id="plan", tool_call_id="call-2", tool_name="read"),
        ToolStarted(node_id="plan", tool_call_id=other.id, tool_name="read"),
        ToolCompleted(node_id="plan", tool_call_id="call-2", tool_name="read", content="b"),
    )
    assert state.status_by_node["plan"] == "running_tool"
    state = run(
        *started(),
        ToolStarted(node_id="plan", tool_call_id="call-2", tool_name="read"),
        ToolStarted(node_id="plan", tool_call_id=other.id, tool_name="read"),
        ToolCompleted(node_id="plan", tool_call_id="call-2", tool_name="read", content="b"),
        ToolCompleted(node_id="plan", tool_call_id=other.id, tool_name="read", content="c"),
    )
    assert state.status_by_node["plan"] == "started"


def test_bash_streams_its_output_and_retries_show_in_the_trace() -> None:
    state = run(
        *started(),
        ToolCallProposed(node_id="plan", label="Plan", tool_call=BASH),
        ToolStarted(node_id="plan", tool_call_id="call-3", tool_name="bash"),
        ToolUpdated(node_id="plan", tool_call_id="call-3", tool_name="bash", content="building"),
        ToolRetrying(
            node_id="plan", tool_call_id="call-3", tool_name="bash", attempt=2, backoff_ms=250
        ),
    )
    live = row(state, "plan", "call-3")
    assert (live["streaming"], live["lastOutput"]) == (True, "building")
    assert state.status_by_node["plan"] == "running_tool"
    assert trace(state)[-1] == ("plan", "running", "retrying tool bash (attempt 2, backoff 250ms)")
    state = run(
        *started(),
        ToolStarted(node_id="plan", tool_call_id="call-3", tool_name="bash"),
        ToolCompleted(node_id="plan", tool_call_id="call-3", tool_name="bash", content="done"),
    )
    assert row(state, "plan", "call-3")["streaming"] is False


def test_unknown_tool_outcome_is_flagged_for_a_person_to_check() -> None:
    state = run(
        *started(),
        ToolStarted(node_id="plan", tool_call_id="call-3", tool_name="bash"),
        ToolOutcomeUnknown(node_id="plan", tool_call_id="call-3", tool_name="bash"),
    )
    flagged = row(state, "plan", "call-3")
    assert (flagged["status"], flagged["isError"]) == ("failed", True)
    assert "may or may not have run" in chat(state, "plan")[-1][1]


def test_artifacts_file_changes_and_edit_batches_are_collected() -> None:
    record = FileChangeRecord(path="a.txt", op="create", timestamp_ms=5, batch_id="b-1")
    batch = EditBatch(batch_id="b-1", node_id="plan", tool_call_id="call-1", tool_name="write")
    state = run(
        ToolArtifactCreated(
            node_id="plan", artifact_id="art-1", tool_name="bash", path="artifacts/x", size_bytes=3
        ),
        EditBatchRecorded(node_id="plan", batch=batch),
        FileChanged(node_id="plan", record=record),
        FileChanged(node_id="build", record=record.model_copy(update={"op": "update"})),
    )
    payload = state.as_json()
    assert payload["toolArtifacts"] == {
        "art-1": {"artifactId": "art-1", "toolName": "bash", "path": "artifacts/x", "sizeBytes": 3}
    }
    assert [c["op"] for c in payload["changedFiles"]] == ["create", "update"]
    assert list(payload["changedFilesByNode"]) == ["plan", "build"]
    assert [b["batch_id"] for b in payload["editBatches"]] == ["b-1"]


# --- run end ----------------------------------------------------------------------------


def test_finished_completes_the_run_with_its_report() -> None:
    report = RunReport(
        workflow_id="wf-1",
        outputs=(ReportOutput(node_id="plan", output={"summary": "x"}),),
        tokens_in=42,
    )
    state = run(
        *started(),
        NodeCompleted(node_id="plan", output={"summary": "x"}),
        Finished(report=report),
    )
    assert state.active is False
    assert state.status == "completed"
    assert state.last_report == report
    assert state.as_json()["lastReport"]["tokens_in"] == 42


def test_aborted_stops_the_first_busy_node_and_its_tools() -> None:
    state = run(
        *started(),
        ToolCallProposed(node_id="plan", label="Plan", tool_call=WRITE),
        ToolStarted(node_id="plan", tool_call_id="call-1", tool_name="write"),
        PhaseTimed(phase="tool", label="write", node_id="plan", duration_ms=5),
        *started("build", "Build"),
        approval("ap-9", (READ,)),
        Aborted(),
    )
    assert state.status_by_node == {"plan": "stopped", "build": "started"}
    assert state.active is False
    assert state.status == "stopped"
    assert row(state, "plan", "call-1")["status"] == "aborted"
    assert row(state, "plan", "call-2")["status"] == "aborted"
    assert state.pending_approvals == []
    stopped = [e for e in trace(state) if e[1] == "stopped"]
    assert stopped == [("plan", "stopped", "Stopped")]
    assert [e.message for e in state.run_trace if e.node_id == "plan"] == [
        "queued",
        "invoking model",
        "running tool write",
        "tool: write · 5ms",
        "Stopped",
    ]


def test_fatal_error_fails_the_run_but_ignored_errors_do_not() -> None:
    state = run(*started(), Error(message="ignored approval for an unknown batch"))
    assert (state.active, state.status, state.last_error) == (True, "running", None)
    state = run(*started(), NodeAwaitingInput(node_id="plan"), Error(message="engine fault"))
    assert (state.active, state.status, state.last_error) == (False, "failed", "engine fault")
    assert state.awaiting_node_ids == []
    assert state.active_manual_node_id is None


def test_resume_makes_a_stopped_run_live_again() -> None:
    state = run(*started(), Aborted(), RunResumed(from_status="stopped"))
    assert (state.active, state.status) == (True, "running")
    state = run(*started(), Aborted(), RunResumed(from_status="stopped"), *started())
    assert state.status_by_node["plan"] == "started"


# --- telemetry, repair, subagents -------------------------------------------------------


def test_phase_timings_are_completed_trace_entries() -> None:
    state = run(
        PhaseTimed(phase="ai_invoke", label="Plan", node_id="plan", duration_ms=850),
        PhaseTimed(phase="tool", label="bash", node_id="plan", duration_ms=2340),
    )
    assert trace(state) == [
        ("plan", "completed", "ai_invoke: Plan · 850ms"),
        ("plan", "completed", "tool: bash · 2.3s"),
    ]
    assert state.run_trace[1].output == {"phase": "tool", "durationMs": 2340}


def test_usage_fills_the_context_window() -> None:
    usage = UsageReport(
        prompt_tokens=900,
        completion_tokens=100,
        total_tokens=1000,
        cached_input_tokens=300,
        cache_creation_input_tokens=50,
    )
    state = run(UsageReported(node_id="plan", usage=usage, model="test-model"))
    assert state.as_json()["contextWindowByNode"]["plan"] == {
        "usedTokens": 1000,
        "cachedInputTokens": 300,
        "cacheCreationInputTokens": 50,
        "maxTokens": 0,
        "model": "test-model",
        "nodeId": "plan",
    }
    state = run(UsageReported(node_id="plan", usage=usage, model="m", max_context_tokens=200_000))
    assert state.context_window_by_node["plan"].max_tokens == 200_000


def test_output_repair_shows_in_the_trace_only() -> None:
    state = run(
        *started(),
        OutputRepairStarted(node_id="plan", model="fixer"),
        OutputRepairSucceeded(node_id="plan", model="fixer"),
        OutputRepairFailed(node_id="plan", reason="still broken"),
    )
    assert [(t.node_label, t.status, t.message) for t in state.run_trace[2:]] == [
        ("output repair", "running", "repairing malformed output · fixer"),
        ("output repair", "completed", "output repaired · fixer"),
        ("output repair", "completed", "output repair failed · still broken"),
    ]
    assert "plan" not in state.chat_logs
    assert state.last_error is None


def test_subagents_are_tracked_and_announced() -> None:
    scout = SubagentSummary(id="plan-subagent-1", name="scout", purpose="look around")
    state = run(
        SubagentsDeclared(node_id="plan", summaries=(scout,)),
        SubagentStarted(node_id="plan", subagent_id="plan-subagent-1"),
    )
    assert [(s.id, s.status) for s in state.subagents_by_node["plan"]] == [
        ("plan-subagent-1", "active")
    ]
    state = run(
        SubagentsDeclared(node_id="plan", summaries=(scout,)),
        SubagentStarted(node_id="plan", subagent_id="plan-subagent-1"),
        SubagentCompleted(node_id="plan", subagent_id="plan-subagent-1"),
        SubagentFailed(node_id="plan", subagent_id="plan-subagent-2", error="boom"),
    )
    assert [(s.id, s.status) for s in state.subagents_by_node["plan"]] == [
        ("plan-subagent-1", "completed"),
        ("plan-subagent-2", "failed"),
    ]
    assert chat(state, "plan") == [
        ("system", "Registered 1 subagent(s)."),
        ("system", "Subagent plan-subagent-1 started."),
        ("system", "Subagent plan-subagent-1 completed."),
        ("system", "Subagent plan-subagent-2 failed: boom"),
    ]


# --- waiting reason, ignored actions, status ----------------------------------------------


def test_an_ignored_action_keeps_the_waiting_reason_and_adds_a_trace_line() -> None:
    retrying = [
        *started(),
        NodeRetrying(node_id="plan", label="Plan", attempt=1, backoff_ms=500, error="429"),
    ]
    waiting = run(*retrying)
    assert waiting.waiting_reason is not None
    ignored = apply_event(
        waiting, ActionIgnored(action={"kind": "retry", "node_id": "plan"}, reason="not failed")
    )
    assert {**ignored.as_json(), "runTrace": []} == {**waiting.as_json(), "runTrace": []}
    assert ignored.run_trace[:-1] == waiting.run_trace
    assert ignored.run_trace[-1].message == "ignored retry for 'plan': not failed"
    assert ignored.run_trace[-1].node_id is None
    malformed = apply_event(
        waiting,
        ActionIgnored(
            action={"kind": "input", "payload": "null"},
            reason="submit_user_input takes one JSON object {node_id, text}; it came with null",
            signal="submit_user_input",
        ),
    )
    assert malformed.run_trace[-1].message.startswith("ignored submit_user_input: ")
    assert malformed.waiting_reason == waiting.waiting_reason
    cleared = apply_event(waiting, PhaseTimed(phase="ai_invoke", label="Plan", duration_ms=1))
    assert cleared.waiting_reason is None


def test_the_run_is_running_while_any_node_works_even_if_another_waits() -> None:
    state = run(
        *started(),
        NodeAwaitingInput(node_id="plan", label="Plan"),
        *started("build", "Build"),
    )
    assert state.status == "running"
    state = run(
        NodeAwaitingInput(node_id="plan", label="Plan"),
        *started("build", "Build"),
        NodeCompleted(node_id="build", output={}),
    )
    assert state.status == "paused"


def test_a_pending_approval_alone_pauses_the_run() -> None:
    state = run(*started(), approval())
    assert state.status == "paused"


def test_apply_event_leaves_its_input_untouched() -> None:
    state = run(*started(), ToolCallProposed(node_id="plan", label="Plan", tool_call=WRITE))
    before = state.as_json()
    apply_event(state, ToolStarted(node_id="plan", tool_call_id="call-1", tool_name="write"))
    apply_event(state, ChatMessage(node_id="plan", role="assistant", content="x"))
    apply_event(state, Aborted())
    assert state.as_json() == before


# --- properties -------------------------------------------------------------------------

node_ids = st.sampled_from(["plan", "build", "plan-subagent-1"])
call_ids = st.sampled_from(["call-1", "call-2", "call-3"])
approval_ids = st.sampled_from(["ap-1", "ap-2"])
tool_names = st.sampled_from(["write", "read", "bash"])
texts = st.text(max_size=8)
small = st.integers(min_value=0, max_value=5000)
tool_calls = st.builds(ToolCall, id=call_ids, name=tool_names, arguments=st.just({"p": 1}))


def _approval_event(approval_id: str, node: str, calls: list[ToolCall]) -> Any:
    request = PendingToolApproval(
        approval_id=approval_id, node_id=node, tool_call=calls[0], tool_calls=tuple(calls)
    )
    return ToolApprovalRequested(request=request)


events = st.one_of(
    st.builds(NodeQueued, node_id=node_ids, label=texts),
    st.builds(NodeStarted, node_id=node_ids, label=texts),
    st.builds(
        ChatMessage,
        node_id=node_ids,
        role=st.sampled_from(["system", "user", "assistant"]),
        content=texts,
        message_id=st.none() | st.sampled_from(["m-1", "m-2"]),
    ),
    st.builds(
        ChatMessageDelta,
        node_id=node_ids,
        message_id=st.sampled_from(["m-1", "m-2"]),
        delta=texts,
        finalize=st.booleans(),
    ),
    st.builds(
        NodeAwaitingInput,
        node_id=node_ids,
        structured_input=st.none() | st.just({"questions": [{"question": "q"}]}),
    ),
    st.builds(ToolCallProposed, node_id=node_ids, tool_call=tool_calls),
    st.builds(
        _approval_event, approval_ids, node_ids, st.lists(tool_calls, min_size=1, max_size=2)
    ),
    st.builds(
        ToolApproved,
        approval_id=approval_ids,
        node_id=node_ids,
        tool_call_id=call_ids,
        tool_name=tool_names,
    ),
    st.builds(
        ToolDenied,
        approval_id=approval_ids,
        node_id=node_ids,
        tool_call_id=call_ids,
        tool_name=tool_names,
    ),
    st.builds(ToolStarted, node_id=node_ids, tool_call_id=call_ids, tool_name=tool_names),
    st.builds(
        ToolRetrying,
        node_id=node_ids,
        tool_call_id=call_ids,
        tool_name=tool_names,
        attempt=small,
        backoff_ms=small,
    ),
    st.builds(
        ToolUpdated, node_id=node_ids, tool_call_id=call_ids, tool_name=tool_names, content=texts
    ),
    st.builds(
        ToolCompleted,
        node_id=node_ids,
        tool_call_id=call_ids,
        tool_name=tool_names,
        content=texts,
        is_error=st.booleans(),
    ),
    st.builds(ToolOutcomeUnknown, node_id=node_ids, tool_call_id=call_ids, tool_name=tool_names),
    st.builds(
        FileChanged,
        node_id=node_ids,
        record=st.builds(FileChangeRecord, path=texts, op=st.just("update")),
    ),
    st.builds(NodeCompleted, node_id=node_ids, output=st.just({"summary": "s"})),
    st.builds(NodeInterrupted, node_id=node_ids),
    st.builds(NodeErrored, node_id=node_ids, error=texts),
    st.builds(NodeFailed, node_id=node_ids, error=texts),
    st.builds(NodeRetrying, node_id=node_ids, attempt=small, backoff_ms=small, error=texts),
    st.builds(Finished, report=st.builds(RunReport, workflow_id=st.just("wf-1"))),
    st.just(Aborted()),
    st.builds(Error, message=st.sampled_from(["boom", "ignored stale approval"])),
    st.builds(SubagentStarted, node_id=node_ids, subagent_id=st.just("plan-subagent-1")),
    st.builds(PhaseTimed, phase=st.just("tool"), label=texts, node_id=node_ids, duration_ms=small),
    st.builds(UsageReported, node_id=node_ids, usage=st.builds(UsageReport, total_tokens=small)),
    st.builds(OutputRepairFailed, node_id=node_ids, reason=texts),
    st.builds(RunResumed, from_status=st.just("stopped")),
    st.builds(ActionIgnored, action=st.just({"kind": "input"}), reason=texts),
)


def _stamp(raw: list[RunEvent]) -> list[RunEvent]:
    return [stamped(e, seq=i + 1, at_ms=10 * i) for i, e in enumerate(raw)]


@settings(max_examples=150, deadline=None)
@given(st.lists(events, max_size=30))
def test_same_events_give_the_same_state(raw: list[RunEvent]) -> None:
    log = _stamp(raw)
    assert project(log, fresh()).as_json() == project(log, fresh()).as_json()


@settings(max_examples=150, deadline=None)
@given(st.lists(events, max_size=30), st.integers(min_value=0, max_value=30))
def test_projecting_a_prefix_then_the_rest_equals_projecting_all(
    raw: list[RunEvent], cut: int
) -> None:
    log = _stamp(raw)
    whole = project(log, fresh())
    halves = project(log[cut:], project(log[:cut], fresh()))
    assert halves.as_json() == whole.as_json()


@settings(max_examples=150, deadline=None)
@given(st.lists(events, max_size=30))
def test_every_state_is_json_and_its_status_explains_itself(raw: list[RunEvent]) -> None:
    state = project(_stamp(raw), fresh())
    payload = state.as_json()
    assert WorkflowRunState.model_validate(json.loads(json.dumps(payload))).as_json() == payload
    if not state.active:
        assert state.status in ("stopped", "completed", "failed")
    elif state.status == "paused":
        assert (
            state.awaiting_node_ids
            or state.pending_approvals
            or {"failed", "interrupted"} & set(state.status_by_node.values())
        )
        assert not {"queued", "started", "running_tool"} & set(state.status_by_node.values())
    else:
        assert state.status == "running"


def test_a_failed_subagent_is_no_longer_shown_as_working() -> None:
    from openflow.engine.events import NodeStarted, SubagentFailed, SubagentStarted

    state = initial_state("wf", "run", ["parent"], None)
    events = [
        SubagentStarted(node_id="parent", subagent_id="parent-subagent-1", seq=1),
        NodeStarted(node_id="parent-subagent-1", label="helper", seq=2),
        SubagentFailed(node_id="parent", subagent_id="parent-subagent-1", error="boom", seq=3),
    ]
    for event in events:
        state = apply_event(state, event)
    assert state.status_by_node["parent-subagent-1"] == "failed"
