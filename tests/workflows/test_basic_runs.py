"""Runs end to end on the real Temporal dev server with the scripted provider."""

from __future__ import annotations

import json

import pytest
from temporalio.client import WorkflowUpdateFailedError

from openflow.contracts import Action
from openflow.engine.events import (
    ActionIgnored,
    Finished,
    NodeRetrying,
    NodeStarted,
    ToolCallProposed,
    ToolCompleted,
    UsageReported,
)
from openflow.engine.spec import Workflow
from tests.workflows.conftest import COMPAT, Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_linear_run_completes_and_replays(harness: Harness) -> None:
    harness.script({}, exhausted="echo")
    wf = make_workflow(
        [node("step-a"), node("step-b"), node("step-c")],
        [("step-a", "step-b"), ("step-b", "step-c")],
    )
    run_id = await harness.start(wf, entrypoint="ship it")
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["step-c"] == {"summary": "ship it"}
    state = await harness.state(run_id)
    assert state.status == "completed"
    assert state.status_by_node == {
        "step-a": "completed",
        "step-b": "completed",
        "step-c": "completed",
    }
    events = await harness.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert isinstance(events[-1], Finished)
    handoff = harness.home / "runs" / run_id / "handoffs" / "step-a" / "HANDOFF.json"
    assert json.loads(handoff.read_text()) == {"summary": "ship it"}
    await harness.replay(run_id)


async def test_branch_join_joins_parent_summaries_in_node_order(harness: Harness) -> None:
    harness.script(
        {
            "idea": [{"submit": {"summary": "idea"}}],
            "plan": [{"submit": {"summary": "plan"}}],
            "risk": [{"submit": {"summary": "risk"}}],
        },
        exhausted="echo",
    )
    wf = make_workflow(
        [node("idea"), node("plan"), node("risk"), node("join")],
        [("idea", "plan"), ("idea", "risk"), ("plan", "join"), ("risk", "join")],
    )
    run_id = await harness.start(wf)
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["join"] == {"summary": "plan\nrisk"}
    await harness.replay(run_id)


# The first published versions (`*.v1.workflow.json`) run like the current ones.
@pytest.mark.parametrize("name", ["feature_plan.workflow.json", "feature_plan.v1.workflow.json"])
async def test_compat_feature_plan_runs_unchanged(harness: Harness, name: str) -> None:
    wf = Workflow.load_json((COMPAT / name).read_text())
    harness.script(
        {
            "idea": [{"submit": {"target_user": "devs", "pain": "slow", "outcome": "fast"}}],
            "plan": [{"submit": {"slices": ["one", "two"]}}],
            "risk": [{"submit": {"risks": ["scope"]}}],
            "brief": [{"submit": {"brief": "do it", "next_action": "start"}}],
        },
        exhausted=None,
    )
    run_id = await harness.start(wf, entrypoint="a faster build")
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["brief"] == {"brief": "do it", "next_action": "start"}
    await harness.replay(run_id)


@pytest.mark.parametrize("name", ["idea_to_ship.workflow.json", "idea_to_ship.v1.workflow.json"])
async def test_compat_idea_to_ship_runs_with_people(harness: Harness, name: str) -> None:
    wf = Workflow.load_json((COMPAT / name).read_text())
    harness.script(
        {
            "shape-work": [
                {"ask": "Which feature?"},
                {
                    "submit": {
                        "summary": "shaped",
                        "feature": "export",
                        "spec_reference": "spec.md",
                        "ticket_references": ["T-1"],
                        "frontier_tickets": ["T-1"],
                    }
                },
            ],
            "select-ticket": [
                {
                    "submit": {
                        "summary": "picked",
                        "skill": "implement",
                        "spec_reference": "spec.md",
                        "ticket_reference": "T-1",
                    }
                }
            ],
            "implement-ticket": [
                {"tools": [{"name": "write", "args": {"path": "export.py", "content": "x = 1\n"}}]},
                {
                    "submit": {
                        "summary": "done",
                        "ticket_reference": "T-1",
                        "changed_paths": ["export.py"],
                        "preexisting_dirty_paths": [],
                        "checks": [],
                        "standards_findings": [],
                        "spec_findings": [],
                        "rejected_findings": [],
                        "ready_for_commit": True,
                    }
                },
            ],
            "commit-gate": [
                {"submit": {"summary": "kept", "status": "not_committed", "commit_sha": None}}
            ],
        },
        exhausted=None,
    )
    run_id = await harness.start(wf, entrypoint="CSV export")
    state = await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["shape-work"])
    assert state.status == "paused"
    await harness.runs.act(run_id, Action(kind="input", node_id="shape-work", text="export"))
    state = await harness.wait_for(run_id, lambda s: s.pending_approvals)
    approval = state.pending_approvals[0]
    assert approval.node_id == "implement-ticket"
    await harness.runs.act(
        run_id, Action(kind="approval", approval_id=approval.approval_id, allow=True)
    )
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["commit-gate"]["status"] == "not_committed"
    workspace = harness.home / "runs" / run_id / "workspace"
    assert (workspace / "export.py").read_text() == "x = 1\n"
    await harness.replay(run_id)


async def test_input_answered_by_signal_and_stale_action_rejected(harness: Harness) -> None:
    harness.script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    wf = make_workflow([node("ask", requestUserInput=True)], [])
    run_id = await harness.start(wf, entrypoint="name it")
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await harness.handle(run_id).execute_update(
            "act", Action(kind="input", node_id="other", text="x")
        )
    assert "unknown node 'other'" in str(rejected.value.cause)
    await harness.handle(run_id).signal("submit_user_input", {"node_id": "ask", "text": "Ada"})
    result = await harness.result(run_id)
    assert result.status == "completed"
    state = await harness.state(run_id)
    users = [m.content for m in state.chat_logs["ask"] if m.role == "user"]
    assert "Ada" in users
    await harness.replay(run_id)


async def test_signal_matching_nothing_is_recorded_and_ignored(harness: Harness) -> None:
    harness.script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    wf = make_workflow([node("ask", requestUserInput=True)], [])
    run_id = await harness.start(wf)
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    await harness.handle(run_id).signal("retry_node", {"node_id": "ask"})
    await harness.handle(run_id).signal(
        "submit_tool_approval", {"approval_id": "nope", "allow": True}
    )
    events = []
    for _ in range(100):
        events = [e for e in await harness.events(run_id) if isinstance(e, ActionIgnored)]
        if len(events) == 2:
            break
    assert [e.reason for e in events] == [
        "node 'ask' is not failed or interrupted, so it cannot be retried",
        "no pending approval 'nope'",
    ]
    state = await harness.state(run_id)
    assert state.status == "paused"
    await harness.runs.act(run_id, Action(kind="input", node_id="ask", text="Ada"))
    assert (await harness.result(run_id)).status == "completed"


async def test_approval_denied_tells_the_model_and_run_continues(harness: Harness) -> None:
    harness.script(
        {
            "act": [
                {
                    "tools": [
                        {"name": "write", "args": {"path": "x.txt", "content": "x"}, "id": "call-w"}
                    ]
                },
                {"submit": {"summary": "gave up writing"}},
            ]
        }
    )
    wf = make_workflow([node("act")], [])
    run_id = await harness.start(wf)
    state = await harness.wait_for(run_id, lambda s: s.pending_approvals)
    approval_id = state.pending_approvals[0].approval_id
    await harness.runs.act(
        run_id, Action(kind="approval", approval_id=approval_id, allow=False, reason="not now")
    )
    result = await harness.result(run_id)
    assert result.status == "completed"
    events = await harness.events(run_id)
    done = [e for e in events if isinstance(e, ToolCompleted) and e.tool_call_id == "call-w"]
    assert len(done) == 1 and done[0].is_error
    assert "denied by the user. Reason: not now." in done[0].content
    workspace = harness.home / "runs" / run_id / "workspace"
    assert not (workspace / "x.txt").exists()
    proposed = [e for e in events if isinstance(e, ToolCallProposed)]
    assert len(proposed) == 1
    await harness.replay(run_id)


async def test_transient_errors_then_success_grow_model_attempt(harness: Harness) -> None:
    harness.script(
        {
            "flaky": [
                {"error": "transient", "message": "overloaded"},
                {"error": "transient", "message": "overloaded"},
                {"submit": {"summary": "finally"}},
            ]
        }
    )
    wf = make_workflow([node("flaky")], [], retry_policy={"max_attempts": 3, "backoff_ms": 10})
    run_id = await harness.start(wf)
    result = await harness.result(run_id)
    assert result.status == "completed"
    events = await harness.events(run_id)
    started = [e.model_attempt for e in events if isinstance(e, NodeStarted)]
    assert started == [1, 2, 3]
    assert len([e for e in events if isinstance(e, NodeRetrying)]) == 2
    await harness.replay(run_id)


async def test_permanent_error_parks_node_and_retry_completes(harness: Harness) -> None:
    harness.script(
        {"fragile": [{"error": "permanent", "message": "bad key"}, {"submit": {"summary": "ok"}}]}
    )
    wf = make_workflow([node("fragile")], [])
    run_id = await harness.start(wf)
    state = await harness.wait_for(run_id, lambda s: s.status_by_node["fragile"] == "failed")
    assert state.status == "paused"
    assert state.last_error == "permanent: bad key"
    await harness.runs.act(run_id, Action(kind="retry", node_id="fragile"))
    result = await harness.result(run_id)
    assert result.status == "completed"
    await harness.replay(run_id)


async def test_unconfigured_model_fails_the_run_visibly(harness: Harness) -> None:
    harness.script({})
    wf = make_workflow([node("blank", model="")], [])
    (harness.home / "settings.json").write_text(
        json.dumps(
            {
                "active_provider": "scripted",
                "providers": {"scripted": {"kind": "scripted", "default_model": "", "script": {}}},
            }
        )
    )
    run_id = await harness.start(wf)
    result = await harness.result(run_id)
    assert result.status == "failed"
    assert "has no model configured" in (result.error or "")
    state = await harness.state(run_id)
    assert state.status == "failed"


async def test_usage_and_estimated_cost_reach_the_report(harness: Harness) -> None:
    harness.script({"a": [{"submit": {"summary": "ok"}}]})
    settings = json.loads((harness.home / "settings.json").read_text())
    settings["prices"] = {"test-model": {"input": 1000.0, "output": 2000.0}}
    (harness.home / "settings.json").write_text(json.dumps(settings))
    run_id = await harness.start(make_workflow([node("a")], []))
    assert (await harness.result(run_id)).status == "completed"
    state = await harness.state(run_id)
    report = state.last_report
    assert report is not None
    assert report.tokens_in > 0 and report.tokens_out > 0
    expected = (report.tokens_in * 1000.0 + report.tokens_out * 2000.0) / 1_000_000
    assert report.estimated_cost_usd == pytest.approx(expected)
    usage = [e for e in await harness.events(run_id) if isinstance(e, UsageReported)]
    assert [e.node_id for e in usage] == ["a", "__post_run_review"]
    turn = usage[0].usage
    node_cost = (turn.prompt_tokens * 1000.0 + turn.completion_tokens * 2000.0) / 1_000_000
    assert turn.cost_usd == pytest.approx(node_cost)
    # The report counts the post-run review's call too: it is spent like any other.
    assert report.tokens_in > turn.prompt_tokens
    assert report.estimated_cost_usd > node_cost
    used = state.context_window_by_node["a"].used_tokens
    assert used == turn.prompt_tokens + turn.completion_tokens
    assert set(state.context_window_by_node) == {"a"}
    # The state's running usage agrees with the report.
    assert state.usage.run.input_tokens == report.tokens_in
    assert state.usage.run.output_tokens == report.tokens_out
    assert state.usage.run.estimated_cost_usd == pytest.approx(report.estimated_cost_usd)
    assert state.usage.by_node["a"].estimated_cost_usd == pytest.approx(node_cost)


async def test_a_provider_without_its_key_fails_the_start_naming_the_variable(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    harness.script({})
    wf = make_workflow([node("a")], [], provider_id="anthropic")
    run_id = await harness.start(wf)
    result = await harness.result(run_id)
    assert result.status == "failed"
    assert "ANTHROPIC_API_KEY" in (result.error or "")
    state = await harness.state(run_id)
    assert state.status == "failed"
    assert "ANTHROPIC_API_KEY" in (state.last_error or "")
    await harness.replay(run_id)
