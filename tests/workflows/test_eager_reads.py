"""Reads a model turn runs right after its reply: one activity a turn, the engine still decides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openflow.contracts import Action
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _activities(harness: Harness, run_id: str) -> list[str]:
    """The run's activities in order, its start's (a local activity, a marker) included."""
    history = await harness.handle(run_id).fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        if e.HasField("activity_task_scheduled_event_attributes")
        else "prepare_run"
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        or e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]


def _transcript(harness: Harness, run_id: str, node_id: str) -> list[dict[str, Any]]:
    path = harness.home / "runs" / run_id / "transcripts" / f"{node_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _results(items: list[dict[str, Any]]) -> dict[str, str]:
    return {
        item["result"]["tool_call_id"]: item["result"]["content"]
        for item in items
        if item["kind"] == "tool_result"
    }


async def test_reads_run_inside_the_model_turn(harness: Harness) -> None:
    harness.script(
        {
            "look": [
                {"tools": [{"name": "write", "args": {"path": "notes.txt", "content": "hello"}}]},
                {
                    "tools": [
                        {"name": "read", "args": {"path": "notes.txt"}, "id": "call-read"},
                        {"name": "ls", "args": {"path": "."}, "id": "call-ls"},
                    ]
                },
                {"submit": {"summary": "looked"}},
            ]
        }
    )
    run_id = await harness.start(make_workflow([node("look", tools={"approvalMode": "yolo"})], []))
    result = await harness.result(run_id)
    assert result.status == "completed"
    # The write is a batch of its own (sent at most once); the two reads came back with the
    # reply that asked for them: no tool_batch activity for them.
    assert await _activities(harness, run_id) == [
        "prepare_run",
        "model_turn",
        "tool_batch",
        "model_turn",
        "model_turn",  # the submit, which stores the handoff too
        "model_turn",  # the post-run review
    ]
    events = await harness.events(run_id)
    done = {e.tool_call_id: e for e in events if e.type == "ToolCompleted"}
    assert "hello" in done["call-read"].content
    assert "notes.txt" in done["call-ls"].content
    started = [e.tool_call_id for e in events if e.type == "ToolStarted"]
    assert sorted(started) == sorted(done) and len(started) == 3
    # The model saw both results on its next turn, full, in call order after its calls.
    transcript = _transcript(harness, run_id, "look")
    results = _results(transcript)
    assert "hello" in results["call-read"] and "notes.txt" in results["call-ls"]
    kinds = [item["kind"] for item in transcript]
    reads = kinds.index("tool_result", kinds.index("tool_result") + 1) - 2
    assert kinds[reads : reads + 4] == ["tool_call", "tool_call", "tool_result", "tool_result"]
    assert [t for t in kinds if t == "tool_result"] == ["tool_result"] * 3, "each result once"
    await harness.replay(run_id)


async def test_reads_wait_for_approval_when_the_node_asks_first(harness: Harness) -> None:
    harness.script(
        {
            "careful": [
                {"tools": [{"name": "ls", "args": {"path": "."}, "id": "call-ls"}]},
                {"submit": {"summary": "listed"}},
            ]
        }
    )
    wf = make_workflow([node("careful", tools={"approvalMode": "always_ask"})], [])
    run_id = await harness.start(wf)
    state = await harness.wait_for(run_id, lambda s: s.pending_approvals)
    # Nothing ran before the person decided: the listing happens after the approval.
    (harness.home / "runs" / run_id / "workspace" / "late.txt").write_text("made while waiting")
    await harness.runs.act(
        run_id,
        Action(kind="approval", approval_id=state.pending_approvals[0].approval_id, allow=True),
    )
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert (await _activities(harness, run_id)).count("tool_batch") == 1
    events = await harness.events(run_id)
    done = [e for e in events if e.type == "ToolCompleted"]
    assert len(done) == 1 and "late.txt" in done[0].content
    await harness.replay(run_id)


async def test_reads_the_engine_plans_otherwise_run_as_a_batch(
    harness: Harness, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "plan.md").write_text("the plan")
    # An absolute path inside the project: the engine plans the call with the relative path,
    # so the read the model turn ran is not the planned call and is dropped.
    harness.script(
        {
            "abs": [
                {"tools": [{"name": "read", "args": {"path": str(project / "plan.md")}}]},
                {"submit": {"summary": "read it"}},
            ]
        }
    )
    wf = make_workflow([node("abs", tools={"approvalMode": "yolo"})], [])
    run_id = await harness.start(wf, project_dir=str(project))
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert (await _activities(harness, run_id)).count("tool_batch") == 1
    events = await harness.events(run_id)
    started = [e for e in events if e.type == "ToolStarted"]
    done = [e for e in events if e.type == "ToolCompleted"]
    assert len(started) == len(done) == 1
    assert started[0].arguments["path"] == "plan.md"
    assert "the plan" in done[0].content
    assert list(_results(_transcript(harness, run_id, "abs")).values()) == [done[0].content]
    await harness.replay(run_id)
