"""OpenFlow's engine scenarios (OPENFLOW_SPEC 14.4), ported to this engine.

Test names carry the scenario number. Where this project deliberately differs from OpenFlow the
docstring says so; those differences have their own tests at the end of the file.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from openflow.engine import advance as engine
from openflow.engine.spec import Workflow
from openflow.engine.state import (
    CallModel,
    CancelRequested,
    InputGiven,
    MessageSent,
    ModelReplied,
    RunSnapshot,
    RunTools,
    ToolResultSummary,
    ToolsFinished,
)
from openflow.engine.transcript import AssistantItem, ToolCallItem, ToolResultItem, UserItem
from tests.engine.driver import (
    Driver,
    agent_node,
    ask,
    call,
    empty,
    message,
    mixed,
    ok_summary,
    permanent,
    question,
    run,
    single_agent_workflow,
    tool_bash,
    tool_read,
    tool_write,
    tools,
    transient,
    truncated,
    workflow,
)

INTERACTIVE = {"requestUserInput": True}
CONVERSATION = {"requestUserInput": True, "conversationMode": True, "handoff": {"format": "legacy"}}
ONE_QUESTION = {
    "questions": [
        {
            "id": "scope",
            "header": "Scope",
            "question": "Which scope?",
            "options": [
                {"label": "Small", "description": "Just the core"},
                {"label": "Large", "description": "Everything"},
            ],
        }
    ]
}


def users(d: Driver, node_id: str) -> list[str]:
    return [i.content for i in d.node(node_id).conversation.transcript if isinstance(i, UserItem)]


def last_item(d: Driver, node_id: str) -> Any:
    return d.node(node_id).conversation.transcript[-1]


def errors(d: Driver, node_id: str) -> list[str]:
    return [e.error for e in d.of_type("NodeErrored") if e.node_id == node_id]


def roundtrip(snapshot: RunSnapshot) -> RunSnapshot:
    return RunSnapshot.model_validate_json(snapshot.model_dump_json())


# --- retry / recovery -------------------------------------------------------------------


def test_01_interrupted_tool_batch_closes_dangling_tool_calls() -> None:
    def interrupted_batch(batch: RunTools) -> ToolsFinished:
        return ToolsFinished(batch_id=batch.batch_id, results=(), interrupted=True)

    d = run(
        single_agent_workflow(), {"first": [tool_read(id="call-1")]}, tool_answer=interrupted_batch
    )
    ns = d.node("first")
    assert ns.interrupted and d.plan is not None and d.plan.awaiting.retryables == ("first",)
    assert [i.kind for i in ns.conversation.transcript] == ["tool_call", "tool_result"]
    assert "interrupted or cancelled" in ns.conversation.transcript[1].result.content
    assert "NodeInterrupted" in d.event_types("first")


def test_02_retry_saturates_model_attempt_at_255() -> None:
    d = run(
        single_agent_workflow(),
        {"first": [permanent()] * 300},
        retries={"first": [None] * 300},
    )
    assert d.node("first").model_attempt == 255
    attempts = [c.intent.model_attempt for c in d.model.calls]
    assert attempts == sorted(attempts) and attempts[-1] == 255


def test_03_retry_keeps_the_conversation_and_resets_recovery_budgets() -> None:
    d = run(
        single_agent_workflow(),
        {"first": [mixed(), truncated(), mixed(), truncated(), permanent()]},
    )
    ns = d.node("first")
    assert ns.failed == "permanent: bad key"
    assert (ns.conversation.counters.mixed, ns.conversation.counters.truncation) == (2, 2)
    kept = list(ns.conversation.transcript)
    d.feed(engine_retry("first"))
    ns = d.node("first")
    assert ns.conversation.counters.model_dump() == {
        k: 0 for k in ns.conversation.counters.model_dump()
    }
    assert ns.conversation.transcript == kept and ns.model_attempt == 2


def engine_retry(node_id: str, text: str | None = None) -> Any:
    from openflow.engine.state import RetryRequested

    return RetryRequested(node_id=node_id, message=text)


def test_04_retry_with_a_message_appends_it() -> None:
    d = run(
        single_agent_workflow(),
        {"first": [permanent(), ok_summary()]},
        retries={"first": ["Try again"]},
    )
    assert d.snapshot.status == "completed"
    second = d.model.requests("first")[1]
    assert isinstance(second.transcript[-1], UserItem)
    assert second.transcript[-1].content == "Try again"
    assert second.intent.model_attempt == 2


def test_05_retry_of_an_interrupted_node_keeps_transcript_and_clears_transient_streak() -> None:
    from tests.engine.driver import interrupted

    d = run(single_agent_workflow(), {"first": [tool_read(), transient(), interrupted()]})
    ns = d.node("first")
    assert ns.interrupted and ns.conversation.transient_streak == 1
    kept = list(ns.conversation.transcript)
    d.feed(engine_retry("first"))
    assert (
        d.node("first").conversation.transient_streak == 0
        and d.node("first").conversation.transcript == kept
    )


def test_06_mixed_tool_turn_is_corrected_without_executing_calls() -> None:
    d = run(single_agent_workflow(), {"first": [mixed(), ok_summary()]})
    assert d.snapshot.status == "completed" and len(d.model.calls) == 2 and not d.batches
    nudge = d.model.calls[1].transcript[-1].content
    assert "mixed harness and executable tools" in nudge and "write" in nudge


def test_07_output_truncation_retries_with_small_write_feedback() -> None:
    d = run(single_agent_workflow(), {"first": [truncated("write"), ok_summary()]})
    assert d.snapshot.status == "completed" and len(d.model.calls) == 2
    nudge = d.model.calls[1].transcript[-1].content
    assert "output token limit" in nudge and "write" in nudge and "smaller" in nudge


@pytest.mark.parametrize(
    ("scenario", "turn", "message"),
    [
        ("08", truncated("write"), "output token limit"),
        ("09", mixed(), "mixed incompatible tools"),
    ],
)
def test_08_09_protocol_errors_fail_the_node_after_three_nudges(
    scenario: str, turn: Any, message: str
) -> None:
    d = run(single_agent_workflow(), {"first": [turn] * 3})
    assert errors(d, "first") == ["scripted model exhausted"]
    d = run(single_agent_workflow(), {"first": [turn] * 4})
    assert len(errors(d, "first")) == 1 and message in errors(d, "first")[0]
    assert d.snapshot.status == "paused", "a failed node is a retryable pause, not a failed run"


def test_10_live_message_while_a_tool_runs_reaches_the_next_request() -> None:
    wf = single_agent_workflow(**CONVERSATION, tools={"approvalMode": "yolo"})
    d = Driver(wf, {"first": [tool_read(), message("Read it.")]})
    d.hold("batch")
    d.start()
    d.step()
    assert any(isinstance(i, RunTools) for i in d.pending)
    plan = d.feed(MessageSent(node_id="first", text="while tool runs"))
    assert "ActionIgnored" not in [e.type for e in plan.events]
    d.release("batch")
    d.run()
    assert d.plan is not None and d.plan.awaiting.inputs == ("first",)
    assert len(d.model.calls) == 2
    assert "while tool runs" in [
        i.content for i in d.model.calls[1].transcript if isinstance(i, UserItem)
    ]


def test_11_transient_retry_sleeps_its_backoff_first() -> None:
    wf = single_agent_workflow()
    wf.settings.retry_policy.max_attempts = 1
    wf.settings.retry_policy.backoff_ms = 500
    d = run(wf, {"first": [transient(), ok_summary()]})
    assert d.snapshot.status == "completed" and len(d.model.calls) == 2
    assert d.now >= 500
    retrying = d.of_type("NodeRetrying")
    assert len(retrying) == 1 and retrying[0].backoff_ms >= 500


def test_12_cancel_during_backoff_stops_the_run_before_the_timer() -> None:
    wf = single_agent_workflow()
    wf.settings.retry_policy.backoff_ms = 5000
    d = Driver(wf, {"first": [transient()] * 10})
    d.when(lambda drv: bool(drv.timers), CancelRequested())
    d.run()
    assert d.snapshot.status == "stopped" and d.now < 5000
    assert d.event_types()[-1] == "Aborted"


def test_13_24_76_checkpoints_keep_streaks_and_protocol_budgets() -> None:
    d = run(
        single_agent_workflow(),
        {"first": [mixed(), mixed(), truncated(), message("thinking aloud"), transient()]},
    )
    restored = roundtrip(d.snapshot)
    ns = restored.nodes["first"]
    assert ns.conversation.transient_streak == 1
    assert ns.conversation.counters.auto_continue == 1
    assert restored == d.snapshot
    d2 = run(single_agent_workflow(), {"first": [mixed(), mixed(), truncated(), permanent()]})
    counters = roundtrip(d2.snapshot).nodes["first"].conversation.counters
    assert (counters.mixed, counters.truncation) == (2, 1)


def test_25_transient_streak_resets_after_a_successful_turn() -> None:
    wf = single_agent_workflow()
    wf.settings.retry_policy.max_attempts = 2
    script = [transient(), transient(), tool_read(), transient(), transient(), ok_summary()]
    d = run(wf, {"first": script})
    assert d.snapshot.status == "completed" and errors(d, "first") == []


def test_26_model_attempt_never_decreases_after_a_streak_reset() -> None:
    script = [transient(), tool_read(), transient(), permanent(), ok_summary()]
    d = run(single_agent_workflow(), {"first": script}, retries={"first": [None]})
    attempts = [c.intent.model_attempt for c in d.model.calls]
    assert attempts == sorted(attempts) and attempts[-1] == 4


def test_27_transient_backoff_blocks_only_the_failing_node() -> None:
    wf = workflow([agent_node("a"), agent_node("b")])
    wf.settings.retry_policy.backoff_ms = 20_000
    d = run(wf, {"a": [transient(), ok_summary("a")], "b": [ok_summary("b")]})
    done = {e.node_id: e.at_ms for e in d.of_type("NodeCompleted")}
    assert done["b"] < 20_000 <= done["a"]


# --- plan mode ----------------------------------------------------------------------------

PLAN_SCRIPT = [
    tools(call("write", {"path": "run://PLAN.md", "content": "# Plan"})),
    tools(call("openflow_write_plan_artifact", {"markdown": "# Plan"}, "call-seal")),
    ok_summary("the plan"),
]


def plan_workflow(**source: Any) -> Workflow:
    nodes = [agent_node("freeze", **{**INTERACTIVE, **source})]
    nodes += [agent_node(n) for n in ("d1", "d2", "d3")]
    edges = [("freeze", n) for n in ("d1", "d2", "d3")]
    return workflow(nodes, edges, planMode={"evidenceSourceNodeId": "freeze"})


def without_plan_mode(wf: Workflow, **source: Any) -> Workflow:
    data = wf.to_json_dict()
    data["settings"]["planMode"] = None
    data["nodes"][0]["agent"].update(source)
    return Workflow.from_json_dict(data)


def test_14_workflows_without_plan_mode_keep_execution_tools_and_no_packet() -> None:
    d = run(single_agent_workflow(), {"first": [ok_summary()]})
    request = d.model.calls[0].intent.request
    assert request.tool_access_policy == "execution"
    assert request.input is not None and "change_evidence_packet" not in request.input
    assert d.snapshot.plan_source is None and d.snapshot.packet is None


def test_15_plan_mode_pins_source_and_packet_when_the_workflow_changes() -> None:
    d = Driver(plan_workflow(), {"freeze": PLAN_SCRIPT}, approvals=[("", True, None)])
    d.hold("model:d")
    d.run()
    assert d.snapshot.packet is not None and not d.snapshot.planning
    assert d.of_type("NodeCompleted")[0].node_id == "freeze"
    changed = d.snapshot.model_copy(update={"workflow": without_plan_mode(d.snapshot.workflow)})
    d.release("model:d")
    for n in ("d1", "d2", "d3"):
        d.model.add(n, ok_summary(n))
    d.resume(changed)
    d.run()
    assert d.snapshot.status == "completed"
    downstream = [c.intent.request for c in d.model.calls if c.node_id.startswith("d")]
    resumed = downstream
    assert [r.node_id for r in resumed] == ["d1", "d2", "d3"]
    packets = [r.input["change_evidence_packet"] for r in resumed if r.input]
    assert all(r.tool_access_policy == "execution" for r in resumed)
    assert len(packets) == 3 and packets[0] == packets[1] == packets[2]
    assert packets[0]["sourceNodeId"] == "freeze" and packets[0]["schemaVersion"] == 1
    from openflow.engine.state import canonical_sha256

    assert packets[0]["sha256"] == canonical_sha256(packets[0]["content"])
    assert packets[0]["content"] == {"summary": "the plan"}


def test_16_pinned_source_stays_conversational_before_freeze_after_restore() -> None:
    d = Driver(plan_workflow(), {})
    d.hold("model:freeze")
    d.run()
    changed = d.snapshot.model_copy(
        update={"workflow": without_plan_mode(d.snapshot.workflow, requestUserInput=False)}
    )
    plan = d.resume(changed)
    request = next(i for i in plan.intents if isinstance(i, CallModel)).request
    assert request.node_id == "freeze"
    assert request.tool_access_policy == "planning" and request.allow_user_input
    assert "openflow_request_user_input" in [t.name for t in request.harness_tools]
    assert engine.check(d.snapshot, MessageSent(node_id="freeze", text="note")) is None


@pytest.mark.parametrize(
    ("scenario", "tamper", "reason"),
    [
        ("17", {"content": {"summary": "edited"}}, "does not match its sha256"),
        ("18", {"source_node_id": "d1"}, "not the pinned Plan Mode source"),
    ],
)
def test_17_18_resume_rejects_a_tampered_change_evidence_packet(
    scenario: str, tamper: dict[str, Any], reason: str
) -> None:
    d = Driver(plan_workflow(), {"freeze": PLAN_SCRIPT}, approvals=[("", True, None)])
    d.hold("model:d")
    d.run()
    assert d.snapshot.packet is not None
    bad = d.snapshot.model_copy(update={"packet": d.snapshot.packet.model_copy(update=tamper)})
    plan = d.resume(bad)
    assert plan.status == "failed" and plan.done
    failed = [e for e in plan.events if e.type == "NodeFailed"]
    assert len(failed) == 1 and reason in failed[0].error


def test_19_plan_mode_denies_hidden_write_mcp_and_subagent_calls() -> None:
    batch = tools(
        call("write", {"path": "src/lib.rs", "content": "x"}),
        call("mcp/example", {}),
        call("openflow_call_subagent", {"id": "x"}),
        call("read", {"path": "src/lib.rs"}),
    )
    d = run(plan_workflow(), {"freeze": [batch, ask("Which scope?")]})
    assert d.plan is not None and d.plan.awaiting.inputs == ("freeze",)
    assert [[c.name for c in b.calls] for b in d.batches] == [["read"]]
    denied = [
        i.result.content
        for i in d.node("freeze").conversation.transcript
        if isinstance(i, ToolResultItem) and i.result.is_error
    ]
    assert len(denied) == 3 and all("blocked by Plan Mode" in text for text in denied)
    assert d.model.calls[0].intent.request.tool_access_policy == "planning"


@pytest.mark.parametrize("mode", ["read_only", "yolo"])
def test_20_plan_source_seal_always_requires_explicit_approval(mode: str) -> None:
    d = run(plan_workflow(tools={"approvalMode": mode}), {"freeze": PLAN_SCRIPT})
    assert len(d.batches) == 1, "the draft write runs without approval, even read-only"
    pending = list(d.snapshot.batches.values())
    assert len(pending) == 1 and pending[0].requires_approval
    assert [c.name for c in pending[0].calls] == ["openflow_write_plan_artifact"]


def test_21_plan_source_cannot_complete_before_an_approved_seal() -> None:
    d = run(plan_workflow(), {"freeze": [ok_summary("too early")]})
    assert d.snapshot.packet is None and not d.node("freeze").has_output
    last = last_item(d, "freeze")
    assert isinstance(last, UserItem)
    assert "openflow_write_plan_artifact" in last.content
    assert "explicit human approval" in last.content


def test_22_non_source_node_cannot_mutate_or_seal_the_run_plan() -> None:
    wf = workflow(
        [agent_node("freeze", **INTERACTIVE), agent_node("notes")],
        planMode={"evidenceSourceNodeId": "freeze"},
    )
    attempt = tools(
        call("write", {"path": "run://PLAN.md", "content": "mine"}),
        call("openflow_write_plan_artifact", {}),
    )
    d = run(wf, {"notes": [attempt]})
    assert not d.batches and not [b for b in d.snapshot.batches.values() if b.node_id == "notes"]
    results = [
        i.result for i in d.node("notes").conversation.transcript if isinstance(i, ToolResultItem)
    ]
    assert len(results) == 2
    assert all(r.is_error and "selected Plan Mode evidence source" in r.content for r in results)


def test_23_sealed_plan_records_the_artifact_reference_without_the_plan_payload() -> None:
    script = {"freeze": PLAN_SCRIPT, **{n: [ok_summary()] for n in ("d1", "d2", "d3")}}
    d = run(plan_workflow(), script, approvals=[("", True, None)])
    seal_calls = [
        i.call
        for i in d.node("freeze").conversation.transcript
        if isinstance(i, ToolCallItem) and i.call.name == "openflow_write_plan_artifact"
    ]
    assert [c.arguments for c in seal_calls] == [
        {"artifact_id": "art-1", "sealed_from": "run://PLAN.md"}
    ]
    shown = [
        e.tool_call.arguments
        for e in d.of_type("ToolCallProposed")
        if e.tool_call.id == "call-seal"
    ]
    assert shown == [{"sealed_from": "run://PLAN.md"}]
    assert d.snapshot.status == "completed"


def test_plan_mode_lets_writers_keep_docs_notes_and_closes_the_draft_in_execution() -> None:
    wf = workflow(
        [agent_node("freeze", **INTERACTIVE), agent_node("notes", tools={"approvalMode": "yolo"})],
        planMode={"evidenceSourceNodeId": "freeze"},
    )
    notes = tools(
        call("write", {"path": "docs/design/notes.md", "content": "ok"}),
        call("write", {"path": "docs/notes.txt", "content": "no"}),
        call("bash", {"command": "ls"}),
    )
    d = run(
        wf, {"notes": [notes, ok_summary()], "freeze": PLAN_SCRIPT}, approvals=[("", True, None)]
    )
    results = {
        i.result.tool_call_id: i.result
        for i in d.node("notes").conversation.transcript
        if isinstance(i, ToolResultItem)
    }
    contents = [r.content for r in results.values()]
    assert sum("ok: write" in c for c in contents) == 1
    assert sum("blocked by Plan Mode" in c for c in contents) == 2
    assert any("bash cannot run" in c for c in contents)
    wf2 = workflow(
        [agent_node("freeze", **INTERACTIVE), agent_node("after", tools={"approvalMode": "yolo"})],
        [("freeze", "after")],
        planMode={"evidenceSourceNodeId": "freeze"},
    )
    late = tools(call("write", {"path": "run://PLAN.md", "content": "late"}))
    d2 = run(
        wf2, {"freeze": PLAN_SCRIPT, "after": [late, ok_summary()]}, approvals=[("", True, None)]
    )
    late_results = [
        i.result for i in d2.node("after").conversation.transcript if isinstance(i, ToolResultItem)
    ]
    assert len(late_results) == 1 and "blocked by Plan Mode" in late_results[0].content
    assert d2.snapshot.status == "completed"


# --- graph / requests / state -------------------------------------------------------------


def test_29_shared_context_is_appended_to_the_system_messages() -> None:
    wf = workflow([agent_node("first")], shared_context="Follow the style guide.")
    d = run(wf, {"first": [ok_summary()]})
    system = d.model.calls[0].intent.request.system_messages
    assert system[-1] == "--- Workflow context ---\nFollow the style guide."


@pytest.mark.parametrize("auto_start", [True, False])
def test_30_31_a_node_runs_and_completes_whatever_auto_start_says(auto_start: bool) -> None:
    d = run(single_agent_workflow(auto_start=auto_start), {"first": [ok_summary()]})
    assert d.snapshot.status == "completed"
    assert d.snapshot.report is not None
    assert d.snapshot.report["outputs"] == [{"node_id": "first", "output": {"summary": "ok"}}]
    assert len(d.model.calls) == 1


def test_32_model_requested_input_resumes_the_same_conversation() -> None:
    d = run(
        single_agent_workflow(**INTERACTIVE),
        {"first": [ask("Which audience?"), ok_summary()]},
        inputs={"first": ["Developers"]},
    )
    assert d.snapshot.status == "completed"
    last = d.model.calls[-1].transcript
    assert last == [AssistantItem(content="Which audience?"), UserItem(content="Developers")]


def test_36_input_for_the_wrong_node_is_rejected_without_advancing() -> None:
    wf = workflow([agent_node("idea", **INTERACTIVE), agent_node("other")], [("idea", "other")])
    d = run(wf, {"idea": [ask("What idea?")]})
    wrong = InputGiven(node_id="other", text="hi")
    assert (
        engine.check(d.snapshot, wrong) == "node 'other' is not waiting for input (waiting: idea)"
    )
    plan = d.feed(wrong)
    assert [e.type for e in plan.events] == ["ActionIgnored"]
    assert plan.status == "paused" and plan.awaiting.inputs == ("idea",)
    assert not d.node("other").has_output


def test_37_tool_calls_pause_for_approval_and_resume_after_results() -> None:
    wf = single_agent_workflow(tools={"approvalMode": "always_ask"})
    d = run(wf, {"first": [tool_read(), ok_summary()]})
    assert d.plan is not None and len(d.plan.awaiting.approvals) == 1 and not d.batches
    d.approvals.append(("", True, None))
    d.run()
    assert d.snapshot.status == "completed" and len(d.batches) == 1


def test_38_absolute_paths_under_the_project_root_become_repo_relative() -> None:
    d = run(
        single_agent_workflow(),
        {"first": [tool_read("/repo/app/package.json"), ok_summary()]},
        project_root="/repo/app",
    )
    calls = [i.call for i in d.node("first").conversation.transcript if isinstance(i, ToolCallItem)]
    assert calls[0].arguments == {"path": "package.json"}
    assert d.batches[0].calls[0].arguments == {"path": "package.json"}


def test_39_yolo_mode_skips_tool_approval() -> None:
    wf = single_agent_workflow(tools={"approvalMode": "yolo"})
    d = run(wf, {"first": [tool_bash(), ok_summary()]})
    assert d.snapshot.status == "completed" and not d.of_type("ToolApprovalRequested")


def test_40_runtime_approval_patch_applies_before_the_tool_decision() -> None:
    wf = single_agent_workflow(tools={"approvalMode": "always_ask"})
    d = Driver(wf, {"first": [tool_bash(), ok_summary()]})
    d.start()
    d.snapshot.nodes["first"].runtime_patch["approval_mode"] = "yolo"
    d.run()
    assert d.snapshot.status == "completed" and not d.of_type("ToolApprovalRequested")


def test_41_a_misrouted_completion_is_dropped_not_applied() -> None:
    """OpenFlow fails the run on a misrouted completion; here a fact whose call id the engine
    did not issue (stale or misrouted) is dropped and the real call stays in flight."""
    wf = workflow([agent_node("idea"), agent_node("other")], [("idea", "other")])
    d = Driver(wf, {})
    plan = d.start()
    stray = ModelReplied(call_id="model:other-99", node_id="other", reply=ok_summary())
    after = d.feed(stray)
    assert after.events == () and after.intents == ()
    assert after.snapshot == plan.snapshot and after.status == "running"


def test_42_stale_in_flight_work_is_retried_on_resume() -> None:
    """OpenFlow surfaces a stale in-flight node as a retryable; resume here retries it at once."""
    wf = workflow([agent_node("done"), agent_node("stale")])
    d = Driver(wf, {"done": [ok_summary()], "stale": [ok_summary()]})
    d.hold("model:stale")
    d.run()
    assert d.node("done").has_output and d.node("stale").conversation.in_flight is not None
    d.release("model:stale")
    plan = d.resume(roundtrip(d.snapshot))
    assert [i.node_id for i in plan.intents if isinstance(i, CallModel)] == ["stale"]
    d.run()
    assert d.snapshot.status == "completed"


def test_43_44_checkpoints_keep_an_input_pause_and_node_handoffs() -> None:
    wf = workflow([agent_node("a"), agent_node("b", **INTERACTIVE)], [("a", "b")])
    d = run(wf, {"a": [ok_summary("from a")], "b": [ask("More?")]})
    restored = roundtrip(d.snapshot)
    assert restored.nodes["a"].handoff == {"format": "json", "uri": "run://handoffs/a/HANDOFF.json"}
    plan = engine.advance(restored, [], d.now)
    assert plan.status == "paused" and plan.awaiting.inputs == ("b",) and plan.intents == ()


def test_47_same_layer_nodes_call_their_models_concurrently() -> None:
    wf = workflow([agent_node("a"), agent_node("b")])
    plan = Driver(wf).start()
    assert [i.node_id for i in plan.intents if isinstance(i, CallModel)] == ["a", "b"]


def test_48_a_tool_batch_runs_while_another_node_calls_its_model() -> None:
    wf = workflow([agent_node("a", tools={"approvalMode": "yolo"}), agent_node("b")])
    d = Driver(wf, {"a": [tool_bash(), ok_summary()], "b": [ok_summary()]})
    d.hold("model:b")
    d.start()
    d.step()
    assert {type(i).__name__ for i in d.pending} == {"RunTools", "CallModel"}
    d.release("model:b")
    d.run()
    assert d.snapshot.status == "completed"


def test_49_tool_batch_effects_are_recorded_and_forwarded_downstream() -> None:
    def with_change(batch: RunTools) -> ToolsFinished:
        results = tuple(
            ToolResultSummary(tool_call_id=c.id, tool_name=c.name, content="done")
            for c in batch.calls
        )
        change = {"path": "src/x.rs", "op": "update", "diff_summary": "+1", "timestamp_ms": 5}
        return ToolsFinished(batch_id=batch.batch_id, results=results, changed_files=(change,))

    wf = workflow([agent_node("a", tools={"approvalMode": "yolo"}), agent_node("b")], [("a", "b")])
    d = run(
        wf,
        {"a": [tool_write("src/x.rs"), ok_summary()], "b": [ok_summary()]},
        tool_answer=with_change,
    )
    assert d.node("a").changed_files[0]["path"] == "src/x.rs"
    b_input = d.model.requests("b")[0].intent.request.input
    assert b_input is not None
    assert b_input["changed_files"] == [{"path": "src/x.rs", "op": "update", "diffSummary": "+1"}]


def test_50_stop_mid_tool_marks_the_node_retryable() -> None:
    wf = single_agent_workflow(tools={"approvalMode": "yolo"})
    d = Driver(wf, {"first": [tool_bash(), ok_summary()]})
    d.hold("batch")
    d.when(lambda drv: any(isinstance(i, RunTools) for i in drv.pending), CancelRequested())
    d.run()
    ns = d.node("first")
    assert d.snapshot.status == "stopped" and ns.interrupted and not d.snapshot.batches
    result = ns.conversation.transcript[-1]
    assert (
        isinstance(result, ToolResultItem) and "interrupted or cancelled" in result.result.content
    )
    assert d.plan is not None and any(i.kind == "cancel_work" for i in d.plan.intents)


# --- turn protocol ------------------------------------------------------------------------


def test_51_empty_turns_are_nudged_three_times_then_fail_an_autonomous_node() -> None:
    d = run(single_agent_workflow(), {"first": [empty()] * 4})
    nudges = users(d, "first")
    assert len(nudges) == 3 and all("No human input is available" in n for n in nudges)
    assert len(errors(d, "first")) == 1 and "neither tool calls" in errors(d, "first")[0]


def test_52_interactive_empty_turn_keeps_human_input_available() -> None:
    d = run(single_agent_workflow(**INTERACTIVE), {"first": [empty(), ok_summary()]})
    nudge = d.model.calls[1].transcript[-1].content
    assert "openflow_request_user_input" in nudge and "No human input" not in nudge


def test_53_interactive_node_pauses_for_a_person_after_the_empty_turn_cap() -> None:
    d = run(single_agent_workflow(**INTERACTIVE), {"first": [empty()] * 4})
    ns = d.node("first")
    assert ns.failed is None and ns.awaiting
    assert (
        isinstance(ns.conversation.transcript[-1], AssistantItem)
        and "empty turns" in ns.conversation.transcript[-1].content
    )


def test_54_empty_turn_after_a_narrated_write_gets_the_write_nudge() -> None:
    d = run(single_agent_workflow(), {"first": [message("Writing the brief now."), empty()]})
    assert "already intended to write a file" in users(d, "first")[-1]
    assert "write tool call" in users(d, "first")[-1]


def test_55_write_without_content_is_rejected_with_a_chunked_write_nudge() -> None:
    d = run(single_agent_workflow(), {"first": [message("hmm"), tool_write(content=None)]})
    ns = d.node("first")
    assert not d.batches and ns.conversation.counters.auto_continue == 0
    results = [
        i.result.content for i in ns.conversation.transcript if isinstance(i, ToolResultItem)
    ]
    assert len(results) == 1 and "missing field `content`" in results[0]
    assert "`content`" in users(d, "first")[-1] and "small stub" in users(d, "first")[-1]


def test_56_write_with_empty_content_is_allowed_through_to_pending() -> None:
    d = run(single_agent_workflow(), {"first": [tool_write(content="")]})
    assert len(d.snapshot.batches) == 1
    assert next(iter(d.snapshot.batches.values())).calls[0].arguments["content"] == ""


@pytest.mark.parametrize(
    ("scenario", "turn", "nudge"),
    [
        ("57", ask("Now I'll write the tests."), "Call write immediately"),
        ("58", message("Here is my answer."), "No human input is available"),
    ],
)
def test_57_58_autonomous_node_auto_continues_instead_of_pausing(
    scenario: str, turn: Any, nudge: str
) -> None:
    d = run(single_agent_workflow(), {"first": [turn]})
    ns = d.node("first")
    assert not ns.awaiting and ns.conversation.counters.auto_continue == 1
    assert any(isinstance(i, AssistantItem) for i in ns.conversation.transcript)
    assert nudge in users(d, "first")[-1]


def test_59_autonomous_node_fails_after_the_auto_continue_cap() -> None:
    d = run(single_agent_workflow(), {"first": [message("thinking")] * 11})
    assert errors(d, "first") == [
        "node produced 10 consecutive turns without a tool call while user input is disabled"
    ]
    assert not d.node("first").awaiting and len(users(d, "first")) == 10


def test_60_auto_continue_streak_resets_on_tool_calls() -> None:
    script = [message("a")] * 9 + [tool_read()] + [message("b")] * 10 + [ok_summary()]
    d = run(single_agent_workflow(), {"first": script})
    assert d.snapshot.status == "completed" and errors(d, "first") == []


@pytest.mark.parametrize(
    ("scenario", "turn", "structured"),
    [
        ("61", ask("Which audience?"), None),
        ("62", ask("Here is the complete result; anything to add?"), None),
        ("64", question(ONE_QUESTION), ONE_QUESTION),
    ],
)
def test_61_62_64_interactive_node_pauses_for_real_questions(
    scenario: str, turn: Any, structured: dict[str, Any] | None
) -> None:
    d = run(single_agent_workflow(**INTERACTIVE), {"first": [turn]})
    assert d.plan is not None and d.plan.awaiting.inputs == ("first",)
    awaiting = d.of_type("NodeAwaitingInput")
    assert len(awaiting) == 1 and awaiting[0].structured_input == structured
    assert roundtrip(d.snapshot).nodes["first"].structured_input == structured


def test_63_direct_conversation_plain_reply_ends_the_turn() -> None:
    d = run(single_agent_workflow(**CONVERSATION), {"first": [message("Hello! How can I help?")]})
    ns = d.node("first")
    assert ns.awaiting and ns.conversation.transcript[-1] == AssistantItem(
        content="Hello! How can I help?"
    )
    assert users(d, "first") == []
    assert d.model.calls[0].intent.request.tool_choice == "auto"


def test_65_structured_question_is_dropped_when_disabled_for_the_node() -> None:
    wf = single_agent_workflow(**INTERACTIVE, tools={"allowStructuredUserInput": False})
    d = run(wf, {"first": [question(ONE_QUESTION)]})
    assert d.node("first").awaiting and d.node("first").structured_input is None
    assert d.of_type("NodeAwaitingInput")[0].structured_input is None


def test_66_structured_only_request_retries_with_free_text_feedback_when_disabled() -> None:
    wf = single_agent_workflow(**INTERACTIVE, tools={"allowStructuredUserInput": False})
    blank = {"questions": [{"id": "a", "header": "A", "question": "", "options": []}]}
    d = run(wf, {"first": [question(blank)]})
    assert not d.node("first").awaiting
    assert "Structured questions are not available" in users(d, "first")[-1]
    assert "one direct human-facing question" in users(d, "first")[-1]


def test_67_invalid_structured_question_retries() -> None:
    bad = {"questions": [{"id": "scope", "header": "A very long header", "question": "Which?"}]}
    d = run(single_agent_workflow(**INTERACTIVE), {"first": [question(bad)]})
    assert not d.node("first").awaiting
    assert "structured questions" in users(d, "first")[-1].lower()


def test_68_conversational_node_auto_continues_a_plain_message() -> None:
    d = run(single_agent_workflow(**INTERACTIVE), {"first": [message("Here it is.")]})
    assert not d.node("first").awaiting
    assert "openflow_request_user_input" in users(d, "first")[-1]


@pytest.mark.parametrize(
    ("scenario", "before", "expected"),
    [
        ("69", [], ["narrated creating or updating a file", "Call write immediately"]),
        ("71", [tool_write("a.txt", "x")], ["A write already succeeded", "Call edit"]),
    ],
)
def test_69_71_narrated_write_without_a_tool_gets_a_write_nudge(
    scenario: str, before: list[Any], expected: list[str]
) -> None:
    wf = single_agent_workflow(tools={"approvalMode": "yolo"})
    d = run(wf, {"first": [*before, message("I'll write the file now.")]})
    assert d.node("first").conversation.counters.auto_continue == 1
    assert all(text in users(d, "first")[-1] for text in expected)


def test_70_plan_source_narration_points_at_the_draft_and_the_seal_tool() -> None:
    d = run(plan_workflow(), {"freeze": [message("I'll write the plan now.")]})
    nudge = users(d, "freeze")[-1]
    assert "run://PLAN.md" in nudge and "openflow_write_plan_artifact" in nudge
    assert "call write" in nudge.lower()


def test_72_conversational_node_pauses_after_the_text_only_cap() -> None:
    d = run(single_agent_workflow(**INTERACTIVE), {"first": [message("thinking")] * 11})
    ns = d.node("first")
    assert ns.awaiting and ns.failed is None
    assert (
        isinstance(ns.conversation.transcript[-1], AssistantItem)
        and "kept narrating" in ns.conversation.transcript[-1].content
    )


def test_73_a_valid_pause_resets_the_protocol_recovery_budgets() -> None:
    script = [mixed(), empty(), message("x"), ask("Which?"), message("Done thinking.")]
    d = Driver(single_agent_workflow(**INTERACTIVE), {"first": script}, inputs={"first": ["A"]})
    d.when(lambda drv: drv.node("first").awaiting, CancelRequested())
    d.run()
    counters = d.node("first").conversation.counters
    assert counters.model_dump() == {k: 0 for k in counters.model_dump()}
    d2 = run(single_agent_workflow(**INTERACTIVE), {"first": script}, inputs={"first": ["A"]})
    assert d2.node("first").conversation.counters.auto_continue == 1
    assert "openflow_request_user_input" in users(d2, "first")[-1]


def test_74_invalid_input_requests_fail_after_the_cap_without_pausing() -> None:
    d = run(single_agent_workflow(**INTERACTIVE), {"first": [ask("")] * 4})
    assert not d.of_type("NodeAwaitingInput")
    assert len(errors(d, "first")) == 1 and "invalid human-input requests" in errors(d, "first")[0]


def test_75_invalid_input_request_budget_resets_on_tool_call_progress() -> None:
    script = [ask("")] * 3 + [tool_read()] + [ask(""), ok_summary()]
    d = run(single_agent_workflow(**INTERACTIVE), {"first": script})
    assert d.snapshot.status == "completed" and errors(d, "first") == []


# --- where this project deliberately differs ----------------------------------------------


def readiness_workflow(strict: bool) -> Workflow:
    nodes = [agent_node("a"), agent_node("b"), agent_node("c")]
    return workflow(nodes, [("a", "c")], strictLayers=strict)


@pytest.mark.parametrize("strict", [False, True])
def test_a_per_node_readiness_unless_strict_layers_differs_from_spec_2_2(strict: bool) -> None:
    """By default `c` starts once its own parent `a` is done, while `b` of the same layer is
    still working; with `strictLayers` it waits for the whole layer (OpenFlow's barrier)."""
    script = {"a": [ok_summary()], "b": [tool_read(), ok_summary()], "c": [ok_summary()]}
    d = run(readiness_workflow(strict), script)
    assert d.snapshot.status == "completed"
    order = [(e.type, e.node_id) for e in d.events if e.type in ("NodeStarted", "NodeCompleted")]
    c_started = order.index(("NodeStarted", "c"))
    b_done = order.index(("NodeCompleted", "b"))
    assert (c_started > b_done) is strict


def test_b_pauses_resolve_one_by_one_differs_from_spec_15_12() -> None:
    """An answered input continues at once while another pause still waits, and other branches
    keep running (OpenFlow waits for every pending item before resuming any branch)."""
    wf = workflow(
        [agent_node("a", **INTERACTIVE), agent_node("b", **INTERACTIVE), agent_node("c")],
    )
    script = {"a": [ask("A?"), ok_summary("a")], "b": [ask("B?")], "c": [tool_read(), ok_summary()]}
    d = run(wf, script, inputs={"a": ["yes"]})
    assert d.node("a").has_output and d.node("c").has_output
    assert d.plan is not None and d.plan.status == "paused" and d.plan.awaiting.inputs == ("b",)


def test_c_read_only_is_enforced_by_the_engine_differs_from_spec_15_4() -> None:
    """A write-tier call that reaches a read_only node is denied, never executed."""
    wf = single_agent_workflow(tools={"approvalMode": "read_only"})
    d = run(wf, {"first": [tool_write("a.txt", "x"), tool_bash("rm -rf src"), ok_summary()]})
    assert d.snapshot.status == "completed" and d.batches == []
    results = [
        i.result for i in d.node("first").conversation.transcript if isinstance(i, ToolResultItem)
    ]
    assert len(results) == 2 and all(r.is_error and "read-only" in r.content for r in results)
    assert not {"write", "bash"} & set(d.model.calls[0].intent.request.tool_names)


@pytest.mark.parametrize(
    ("turn", "completes"),
    [
        (message('{"summary": "plain json"}'), True),
        (message('```json\n{"summary": "fenced"}\n```'), True),
        (message('{"wrong": 1}'), False),
        (tools(call("openflow_submit_node_output", {"output": {"summary": 5}})), False),
        (message('{"summary": "x"}', wire="responses"), False),
    ],
)
def test_d_submitted_output_is_validated_by_the_engine_differs_from_spec_15_10(
    turn: Any, completes: bool
) -> None:
    """Plain-JSON text completions and submits are checked against the schema here."""
    d = run(single_agent_workflow(), {"first": [turn]})
    assert d.node("first").has_output is completes
    if not completes:
        assert d.node("first").output is None


def test_e_an_action_that_matches_nothing_is_ignored_not_fatal_spec_15_11() -> None:
    """`check` names the reason; as a signal it becomes ActionIgnored and changes nothing."""
    from openflow.engine.state import ApprovalDecided, RetryRequested

    wf = single_agent_workflow(**INTERACTIVE)
    d = run(wf, {"first": [ask("Which?")]})
    before = d.snapshot
    actions = [
        ApprovalDecided(approval_id="approval-404", allow=True),
        RetryRequested(node_id="first"),
        MessageSent(node_id="ghost", text="hi"),
        InputGiven(node_id="ghost", text="hi"),
    ]
    reasons = [engine.check(before, a) for a in actions]
    assert reasons == [
        "no pending approval 'approval-404'",
        "node 'first' is not failed or interrupted, so it cannot be retried",
        "unknown node 'ghost'",
        "unknown node 'ghost'",
    ]
    plan = d.feed(*actions)
    assert [e.type for e in plan.events] == ["ActionIgnored"] * 4
    assert [e.reason for e in plan.events] == reasons
    assert plan.status == "paused" and plan.awaiting.inputs == ("first",)
    live = single_agent_workflow()
    d2 = Driver(live, {})
    d2.start()
    assert "requestUserInput is off" in str(
        engine.check(d2.snapshot, MessageSent(node_id="first", text="x"))
    )


def test_a_signal_that_did_not_parse_is_recorded_and_changes_nothing_else() -> None:
    from openflow.engine.state import ActionMalformed

    wf = single_agent_workflow(**INTERACTIVE)
    d = run(wf, {"first": [ask("Which?")]})
    before = d.snapshot
    plan = d.feed(
        ActionMalformed(
            signal="submit_user_input",
            action="input",
            reason="submit_user_input takes one JSON object {node_id, text}; it came with null",
            payload="null",
        )
    )
    [event] = plan.events
    assert event.type == "ActionIgnored"
    assert event.signal == "submit_user_input"
    assert event.action == {"kind": "input", "payload": "null"}
    assert "it came with null" in event.reason
    assert plan.intents == ()
    assert plan.status == "paused" and plan.awaiting.inputs == ("first",)
    assert plan.snapshot.model_copy(update={"event_seq": before.event_seq}) == before


def test_f_tool_call_proposed_is_never_duplicated_spec_15_9() -> None:
    wf = single_agent_workflow(tools={"approvalMode": "always_ask"})
    two = tools(call("read", {"path": "a"}), call("bash", {"command": "make"}))
    d = run(wf, {"first": [two, ok_summary()]}, approvals=[("", True, None)])
    proposed = [e.tool_call.id for e in d.of_type("ToolCallProposed")]
    assert len(proposed) == 2 and len(set(proposed)) == 2
    completed = [e.tool_call_id for e in d.of_type("ToolCompleted")]
    assert sorted(completed) == sorted(proposed)


# --- output repair (spec 3.9) ---------------------------------------------------------------


def repaired(output: Any) -> Any:
    from tests.engine.driver import submit

    return submit({"repaired_arguments": {"output": output, "assistant_message": "fixed"}})


def test_output_repair_fixes_a_malformed_submit_without_a_nudge() -> None:
    from tests.engine.driver import submit_raw

    wf = workflow([agent_node("first")], outputRepairModel="repair-model")
    d = run(
        wf,
        {
            "first": [submit_raw('{"output": {"summary": "x"')],
            "first__output_repair": [repaired({"summary": "x"})],
        },
    )
    assert d.snapshot.status == "completed" and d.node("first").output == {"summary": "x"}
    assert users(d, "first") == []
    repair = d.model.calls[1].intent
    assert repair.purpose == "repair" and repair.node_id == "first"
    request = repair.request
    assert (
        request.node_id == "first__output_repair" and request.node_label == "First (output repair)"
    )
    assert request.model == "repair-model" and request.tool_names == ()
    assert repair.delta.base_len == 0 and repair.delta.items == ()
    assert request.input is not None
    assert sorted(request.input) == [
        "expected_output_schema",
        "malformed_arguments",
        "tool_name",
        "validation_detail",
    ]
    assert request.output_schema["required"] == ["repaired_arguments"]
    types = d.event_types("first")
    assert "OutputRepairStarted" in types and "OutputRepairSucceeded" in types
    assert "AiInvokeFailed" not in types


@pytest.mark.parametrize(
    ("repair_script", "reason"),
    [
        ([], "scripted model exhausted"),
        ([repaired({"summary": 5})], "still invalid"),
        ([message("I cannot")], "did not submit"),
    ],
)
def test_output_repair_failure_falls_back_to_the_malformed_submit_nudge(
    repair_script: list[Any], reason: str
) -> None:
    script = {
        "first": [
            tools(call("openflow_submit_node_output", {"output": {"summary": 1}})),
            ok_summary(),
        ],
        "first__output_repair": repair_script,
    }
    d = run(single_agent_workflow(), script)
    assert d.snapshot.status == "completed"
    failed = d.of_type("OutputRepairFailed")
    assert len(failed) == 1 and reason in failed[0].reason
    assert "invalid" in users(d, "first")[0]
    node_calls = [c.intent.request.turn_index for c in d.model.calls if c.intent.purpose == "node"]
    assert node_calls == [0, 1], "the repair call does not use up one of the node's turns"
    assert d.model.calls[1].intent.request.model == "test-model"


def test_output_repair_is_not_tried_for_a_truncated_submit() -> None:
    cut = tools(call("openflow_submit_node_output", {"output": {}}))
    cut = cut.model_copy(update={"finish_reason": "length"})
    d = run(single_agent_workflow(), {"first": [cut, ok_summary()]})
    assert d.snapshot.status == "completed" and not d.of_type("OutputRepairStarted")


# --- totality ---------------------------------------------------------------------------------


def test_advance_never_raises_on_stale_unknown_or_duplicate_facts() -> None:
    from openflow.engine.state import (
        ApprovalDecided,
        HandoffStored,
        ModelFailed,
        RetryRequested,
        TimerFired,
        ToolsOutcomeUnknown,
    )
    from tests.engine.driver import failed

    d = Driver(single_agent_workflow(**INTERACTIVE), {"first": [tool_read(), ask("Q?")]})
    d.run()
    snapshot = d.snapshot
    junk = [
        ModelReplied(call_id="model:first-1", node_id="first", reply=ok_summary()),
        ModelFailed(call_id="nope", node_id="ghost", failure=failed()),
        ToolsFinished(batch_id="batch-404", results=()),
        ToolsOutcomeUnknown(batch_id="batch-404"),
        HandoffStored(node_id="ghost", manifest={}),
        HandoffStored(node_id="first", manifest={"format": "json"}),
        TimerFired(node_id="ghost"),
        ApprovalDecided(approval_id="", allow=False),
        RetryRequested(node_id="ghost"),
        InputGiven(node_id="ghost", text=""),
    ]
    plan = engine.advance(snapshot, junk, d.now)
    assert plan.status == "paused" and plan.intents == ()
    assert {e.type for e in plan.events} == {"ActionIgnored"}
    assert engine.advance(snapshot, junk, d.now) == plan


def test_bad_tool_events_are_noted_not_fatal() -> None:
    def odd(batch: RunTools) -> ToolsFinished:
        results = tuple(
            ToolResultSummary(tool_call_id=c.id, tool_name=c.name, content="ok")
            for c in batch.calls
        )
        return ToolsFinished(
            batch_id=batch.batch_id,
            results=results,
            events=(
                {"type": "NoSuchEvent"},
                {"type": "FileChanged", "record": {"path": "a", "op": "create"}},
            ),
        )

    d = run(single_agent_workflow(), {"first": [tool_read(), ok_summary()]}, tool_answer=odd)
    assert d.snapshot.status == "completed"
    assert [e.message for e in d.of_type("Error")] == [
        "ignored tool event 'NoSuchEvent' of node 'first'"
    ]
    assert len(d.of_type("FileChanged")) == 1
    seqs = [e.seq for e in d.events]
    assert seqs == list(range(1, len(seqs) + 1))


def test_json_handoff_and_snapshot_payloads_are_plain_json() -> None:
    d = run(single_agent_workflow(), {"first": [ok_summary()]})
    assert json.loads(d.snapshot.model_dump_json())["status"] == "completed"
