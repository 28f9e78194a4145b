"""Run events keep their shape through JSON: the `events` query and history depend on it."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from openflow.engine.events import (
    Aborted,
    ActionIgnored,
    AiInvokeFailed,
    ChatMessage,
    ChatMessageDelta,
    EditBatch,
    EditBatchRecorded,
    EditBatchReverted,
    Error,
    FileChanged,
    FileChangeRecord,
    FileSnapshot,
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
    PostRunSuggestion,
    ReportOutput,
    RunEvent,
    RunEventAdapter,
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
from openflow.engine.transcript import Attachment, ToolCall

WRITE = ToolCall(id="call-1", name="write", arguments={"path": "a.txt", "content": "hi"})
READ = ToolCall(id="call-2", name="read", arguments={"path": "b.txt"})
APPROVAL = PendingToolApproval(
    approval_id="ap-1",
    node_id="plan",
    node_label="Plan",
    tool_call=WRITE,
    tool_calls=(WRITE, READ),
)
REPORT = RunReport(
    workflow_id="wf-1",
    outputs=(
        ReportOutput(node_id="b", output={"summary": "second"}),
        ReportOutput(node_id="a", output={"summary": "first"}),
    ),
    read_calls=3,
    redundant_reads=1,
    tokens_in=1200,
    suggestions=(
        PostRunSuggestion(
            id="suggestion-1",
            category="prompt",
            target_node_id="a",
            title="Tighten the prompt",
            evidence="a asked twice",
            recommendation="state the format",
        ),
    ),
    suggestions_error=None,
)

EXAMPLES: list[Any] = [
    NodeQueued(node_id="plan", label="Plan", model_attempt=2),
    NodeStarted(node_id="plan", label="Plan", model_attempt=2),
    ChatMessage(
        node_id="plan",
        role="user",
        content="hello",
        attachments=(Attachment(name="spec.md", media_type="text/markdown", text="# Spec"),),
        message_id="m-1",
    ),
    ChatMessageDelta(node_id="plan", message_id="m-2", role="thinking", delta="hm", finalize=True),
    NodeAwaitingInput(
        node_id="plan",
        label="Plan",
        context="Entrypoint: go\n",
        is_initial=True,
        structured_input={"questions": [{"question": "Which?"}]},
    ),
    ToolCallProposed(node_id="plan", label="Plan", tool_call=WRITE),
    ToolApprovalRequested(request=APPROVAL),
    ToolApproved(approval_id="ap-1", node_id="plan", tool_call_id="call-1", tool_name="write"),
    ToolDenied(
        approval_id="ap-1", node_id="plan", tool_call_id="call-1", tool_name="write", reason="no"
    ),
    ToolStarted(node_id="plan", tool_call_id="call-1", tool_name="write", arguments={"x": 1}),
    ToolRetrying(
        node_id="plan", tool_call_id="call-1", tool_name="bash", attempt=2, backoff_ms=500
    ),
    ToolUpdated(
        node_id="plan",
        tool_call_id="call-1",
        tool_name="bash",
        content="line 1\n",
        output_meta={"exit_code": None},
    ),
    ToolArtifactCreated(
        node_id="plan", artifact_id="art-1", tool_name="bash", path="artifacts/x.txt", size_bytes=9
    ),
    FileChanged(
        node_id="plan",
        record=FileChangeRecord(
            path="a.txt", op="rename", rename_to="b.txt", timestamp_ms=5, batch_id="batch-1"
        ),
    ),
    EditBatchRecorded(
        node_id="plan",
        batch=EditBatch(
            batch_id="batch-1",
            node_id="plan",
            tool_call_id="call-1",
            tool_name="write",
            timestamp_ms=5,
            snapshots=(
                FileSnapshot(path="a.txt", existed=True, content="old"),
                FileSnapshot(path="new.txt", existed=False),
            ),
        ),
    ),
    ToolCompleted(
        node_id="plan",
        tool_call_id="call-1",
        tool_name="write",
        content="wrote 2 bytes",
        is_error=False,
        output_meta={"bytes": 2},
        artifact_ids=("art-1",),
    ),
    NodeCompleted(
        node_id="plan",
        label="Plan",
        output={"summary": "done", "items": [1, 2]},
        handoff={"format": "json", "uri": "run://handoffs/plan/HANDOFF.json"},
    ),
    NodeFailed(node_id="plan", label="Plan", error='node "Plan" has no model configured'),
    NodeInterrupted(node_id="plan", label="Plan"),
    NodeErrored(node_id="plan", label="Plan", error="permanent: 401", model_attempt=1),
    Finished(report=REPORT),
    Aborted(),
    Error(message="engine fault"),
    SubagentsDeclared(
        node_id="plan",
        summaries=(SubagentSummary(id="plan-subagent-1", name="scout", purpose="look"),),
    ),
    SubagentStarted(node_id="plan", subagent_id="plan-subagent-1"),
    SubagentCompleted(node_id="plan", subagent_id="plan-subagent-1"),
    SubagentFailed(node_id="plan", subagent_id="plan-subagent-1", error="boom"),
    PhaseTimed(phase="tool-wait", label="write", node_id=None, duration_ms=1500),
    UsageReported(
        node_id="plan",
        usage=UsageReport(prompt_tokens=10, completion_tokens=5, total_tokens=15),
        model="test-model",
        max_context_tokens=200_000,
    ),
    AiInvokeFailed(node_id="plan", label="Plan", error="transient: 503"),
    OutputRepairStarted(node_id="plan", model="repair-model"),
    OutputRepairSucceeded(node_id="plan", model="repair-model"),
    OutputRepairFailed(node_id="plan", reason="still not JSON"),
    ActionIgnored(action={"kind": "input", "node_id": "nope", "text": "hi"}, reason="not awaiting"),
    RunStarted(
        workflow_id="wf-1", workflow_name="Demo", entrypoint_text="go", entry_node_id="plan"
    ),
    RunResumed(from_status="stopped"),
    NodeRetrying(node_id="plan", label="Plan", attempt=2, backoff_ms=2000, error="503"),
    ToolOutcomeUnknown(node_id="plan", tool_call_id="call-1", tool_name="bash"),
    EditBatchReverted(node_id="plan", label="Plan", batch_id="edit-1", paths=("a.txt",)),
    GrantAdded(node_id="plan", tool="write", path_prefix="docs", by="ana"),
    GrantRevoked(tool="write", path_prefix="docs", by="ana"),
]


def _variant_names() -> set[str]:
    union = get_args(RunEvent)[0]
    return {cls.model_fields["type"].default for cls in get_args(union)}


def test_examples_cover_every_variant() -> None:
    assert {event.type for event in EXAMPLES} == _variant_names()
    assert len(_variant_names()) == 41


@pytest.mark.parametrize("by_alias", [False, True])
def test_every_variant_round_trips_through_json(by_alias: bool) -> None:
    numbered = [stamped(event, seq=i + 1, at_ms=1000 * i) for i, event in enumerate(EXAMPLES)]
    text = RunEventAdapter.dump_json(numbered, by_alias=by_alias)
    assert RunEventAdapter.validate_json(text) == numbered


def test_events_are_plain_json_objects_with_type_seq_and_snake_case_fields() -> None:
    event = stamped(
        ToolCompleted(
            node_id="plan", tool_call_id="call-1", tool_name="read", content="x", is_error=True
        ),
        seq=7,
        at_ms=1234,
    )
    [payload] = json.loads(RunEventAdapter.dump_json([event]))
    assert payload["type"] == "ToolCompleted"
    assert payload["seq"] == 7
    assert payload["at_ms"] == 1234
    assert payload["node_id"] == "plan"
    assert payload["tool_call_id"] == "call-1"
    assert payload["is_error"] is True


def test_events_parse_from_what_the_events_query_returns() -> None:
    payload = [
        {"type": "NodeStarted", "seq": 1, "node_id": "a", "label": "A", "model_attempt": 3},
        {"type": "Aborted", "seq": 2, "at_ms": 10},
    ]
    started, aborted = RunEventAdapter.validate_python(payload)
    assert isinstance(started, NodeStarted)
    assert started.model_attempt == 3
    assert isinstance(aborted, Aborted)
    assert aborted.at_ms == 10


def test_unknown_event_type_is_rejected() -> None:
    with pytest.raises(ValidationError):
        RunEventAdapter.validate_python([{"type": "NodeExploded", "node_id": "a"}])


def test_building_an_event_with_an_unknown_field_fails() -> None:
    with pytest.raises(ValidationError, match="lable"):
        NodeQueued(node_id="a", lable="A")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="bogus"):
        ToolCompleted(node_id="a", tool_call_id="c", tool_name="read", content="", bogus=1)  # type: ignore[call-arg]


def test_stored_events_with_a_field_since_dropped_still_parse() -> None:
    """History and carried snapshots may hold a field no event defines any more."""
    stored = [{"type": "NodeQueued", "seq": 3, "at_ms": 9, "node_id": "a", "retired": True}]
    (event,) = RunEventAdapter.validate_json(json.dumps(stored))
    assert event == NodeQueued(seq=3, at_ms=9, node_id="a")
    assert NodeQueued.model_validate(stored[0]) == event


def test_events_are_immutable() -> None:
    event = NodeQueued(node_id="a")
    with pytest.raises(ValidationError):
        event.node_id = "b"  # type: ignore[misc]


def test_stamping_numbers_and_times_a_copy() -> None:
    event = NodeQueued(node_id="a", label="A")
    numbered = stamped(event, seq=4, at_ms=99)
    assert (numbered.seq, numbered.at_ms) == (4, 99)
    assert (event.seq, event.at_ms) == (0, 0)


def test_pending_approval_speaks_camel_case_and_lists_the_whole_batch() -> None:
    payload = APPROVAL.model_dump(by_alias=True, mode="json")
    assert payload["approvalId"] == "ap-1"
    assert payload["nodeId"] == "plan"
    assert payload["nodeLabel"] == "Plan"
    assert payload["toolCall"]["name"] == "write"
    assert [call["id"] for call in payload["toolCalls"]] == ["call-1", "call-2"]
    assert PendingToolApproval.model_validate(payload) == APPROVAL
    single = PendingToolApproval(approval_id="ap-2", node_id="n", tool_call=READ)
    assert single.batch_calls() == (READ,)


def test_report_sorts_outputs_by_node_id_and_stays_snake_case() -> None:
    assert [o.node_id for o in REPORT.outputs] == ["a", "b"]
    payload = REPORT.model_dump(by_alias=True, mode="json")
    assert set(payload) == {
        "workflow_id",
        "outputs",
        "read_calls",
        "redundant_reads",
        "tokens_in",
        "tokens_out",
        "estimated_cost_usd",
        "suggestions",
        "suggestions_error",
    }
    assert payload["suggestions"][0]["target_node_id"] == "a"


def test_suggestion_accepts_the_reviewer_camel_case_target() -> None:
    suggestion = PostRunSuggestion.model_validate(
        {
            "id": "suggestion-1",
            "category": "tools",
            "targetNodeId": "b",
            "title": "t",
            "evidence": "e",
            "recommendation": "r",
        }
    )
    assert suggestion.target_node_id == "b"


def test_only_errors_starting_with_ignored_are_non_fatal() -> None:
    assert Error(message="engine fault").is_fatal()
    assert not Error(message="ignored approval for unknown batch").is_fatal()


def test_denial_reason_defaults_to_the_user_denial_text() -> None:
    denied = ToolDenied(approval_id="a", node_id="n", tool_call_id="c", tool_name="write")
    assert denied.reason == "Tool call denied by the user."
