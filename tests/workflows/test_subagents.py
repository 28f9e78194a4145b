"""Subagents end to end on the real dev server: declared and saved agents, stop and resume."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from openflow.contracts import Action
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")

SCOUT = "lead-subagent-1"
DECLARE_AND_CALL = {
    "tools": [
        {
            "name": "openflow_declare_subagents",
            "args": {"subagents": [{"name": "scout", "purpose": "Write notes."}]},
        },
        {
            "name": "openflow_call_subagent",
            "args": {"subagent_id": SCOUT, "input": "write notes.txt"},
            "id": "call-scout",
        },
    ]
}


def call_saved(task: str) -> dict[str, Any]:
    return {
        "tools": [
            {
                "name": "openflow_call_subagent",
                "args": {"subagent_id": "reviewer", "input": task},
                "id": "call-reviewer",
            }
        ]
    }


def save_reviewer(harness: Harness) -> None:
    agents = {
        "agents": [
            {
                "id": "reviewer",
                "name": "Reviewer",
                "systemPrompt": "You review notes.",
                "taskPrompt": "Review notes for gaps.",
                "outputSchema": {
                    "type": "object",
                    "properties": {"verdict": {"type": "string"}},
                    "required": ["verdict"],
                },
                "tools": {"approvalMode": "read_only"},
            },
            {"id": "unused", "name": "Unused", "outputSchema": {}},
        ]
    }
    (harness.home / "agents.json").write_text(json.dumps(agents))


async def approve_until_done(harness: Harness, run_id: str, timeout: float = 30.0) -> list[str]:
    """Approve every batch the run asks about until it ends; the approved tools' names."""
    handle = harness.handle(run_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    approved: list[str] = []
    while loop.time() < deadline:
        if (await handle.describe()).status.name != "RUNNING":
            return approved
        state = await harness.state(run_id)
        for pending in state.pending_approvals:
            approved += [call.name for call in pending.tool_calls]
            action = Action(kind="approval", approval_id=pending.approval_id, allow=True)
            await harness.runs.act(run_id, action)
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not end within {timeout}s")


async def test_declared_and_saved_subagents_answer_their_parent_and_replay(
    harness: Harness,
) -> None:
    save_reviewer(harness)
    harness.script(
        {
            "lead": [
                DECLARE_AND_CALL,
                call_saved("review notes.txt"),
                {"submit": {"summary": "lead done"}},
            ],
            SCOUT: [
                {"error": "transient", "message": "overloaded"},
                {"tools": [{"name": "write", "args": {"path": "notes.txt", "content": "hi\n"}}]},
                {"submit": {"summary": "notes written"}},
            ],
            "reviewer": [
                {"tools": [{"name": "read", "args": {"path": "notes.txt"}}]},
                {"submit": {"verdict": "complete"}},
            ],
            # A scripted profile without `exhausted` fails once its turns run out: the post-run
            # review gets a turn of its own.
            "__post_run_review": [{"submit": {"suggestions": []}}],
        },
        exhausted=None,
    )
    wf = make_workflow(
        [node("lead", callableAgents=["reviewer"])],
        [],
        shared_context="Project: notes",
        retry_policy={"max_attempts": 2, "backoff_ms": 10},
    )
    run_id = await harness.start(wf)
    approved = await approve_until_done(harness, run_id)
    assert approved == [
        "openflow_declare_subagents",
        "openflow_call_subagent",
        "openflow_call_subagent",
    ], "the parent's calls are the approval points; the children's tools ask nobody"
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["lead"] == {"summary": "lead done"}

    events = await harness.events(run_id)
    completed = {
        e.tool_call_id: json.loads(e.content)
        for e in events
        if e.type == "ToolCompleted" and e.node_id == "lead"
    }
    assert completed["call-scout"] == {
        "output": {"summary": "notes written"},
        "message": "Subagent 'scout' completed.",
    }
    assert completed["call-reviewer"] == {
        "output": {"verdict": "complete"},
        "message": "Subagent 'Reviewer' completed.",
    }
    subagent_events = [
        (e.type, getattr(e, "subagent_id", None)) for e in events if e.type.startswith("Subagent")
    ]
    assert subagent_events == [
        ("SubagentsDeclared", None),
        ("SubagentsDeclared", None),
        ("SubagentStarted", SCOUT),
        ("SubagentCompleted", SCOUT),
        ("SubagentStarted", "reviewer"),
        ("SubagentCompleted", "reviewer"),
    ]
    assert any(e.type == "NodeRetrying" and e.node_id == SCOUT for e in events)
    reviewer_read = [e for e in events if e.type == "ToolCompleted" and e.node_id == "reviewer"]
    assert reviewer_read[0].content.strip().endswith("hi")

    state = await harness.state(run_id)
    assert [(s.id, s.status) for s in state.subagents_by_node["lead"]] == [
        ("reviewer", "completed"),
        (SCOUT, "completed"),
    ]
    assert state.outputs[SCOUT] == {"summary": "notes written"}
    # What the subagents spent is their parent's.
    reports = [e for e in events if e.type == "UsageReported" and e.node_id != "__post_run_review"]
    assert {e.node_id for e in reports} == {"lead", SCOUT, "reviewer"}
    assert set(state.usage.by_node) == {"lead", "__post_run_review"}
    assert state.usage.by_node["lead"].input_tokens == sum(e.usage.prompt_tokens for e in reports)
    run_dir = harness.home / "runs" / run_id
    assert (run_dir / "workspace" / "notes.txt").read_text() == "hi\n"
    lines = (run_dir / "transcripts" / "reviewer.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["content"] == (
        'You are the saved agent "Reviewer".\n\nTask: review notes.txt'
    )
    headers = [json.loads(p.read_text()) for p in (run_dir / "headers").iterdir()]
    (review_header,) = [h for h in headers if h["node_id"] == "reviewer"]
    assert review_header["system_messages"] == [
        "You review notes.\n\n--- Workflow context ---\nProject: notes"
    ]
    assert review_header["input"] is None and review_header["task_prompt"] == "review notes.txt"
    assert "write" not in review_header["tool_names"]
    await harness.replay(run_id)


async def test_stop_mid_subagent_then_resume_calls_it_again(harness: Harness) -> None:
    harness.script(
        {
            "lead": [
                DECLARE_AND_CALL,
                {
                    "tools": [
                        {
                            "name": "openflow_call_subagent",
                            "args": {"subagent_id": SCOUT, "input": "try again"},
                            "id": "call-again",
                        }
                    ]
                },
                {"submit": {"summary": "lead done"}},
            ],
            SCOUT: [
                {"tools": [{"name": "bash", "args": {"command": "sleep 30"}, "id": "call-sleep"}]},
                {"submit": {"summary": "second try"}},
            ],
        },
        exhausted=None,
    )
    wf = make_workflow([node("lead", tools={"approvalMode": "yolo"})], [])
    run_id = await harness.start(wf)
    await harness.wait_for(run_id, lambda s: s.status_by_node.get(SCOUT) == "running_tool")
    await harness.runs.stop(run_id)
    result = await harness.result(run_id)
    assert result.status == "stopped"
    events = await harness.events(run_id)
    closed = [e for e in events if e.type == "ToolCompleted" and e.node_id == "lead"]
    assert [e.tool_call_id for e in closed][-1] == "call-scout"
    assert "interrupted or cancelled" in closed[-1].content
    failed = [e for e in events if e.type == "SubagentFailed"]
    assert [(e.subagent_id, e.error) for e in failed] == [(SCOUT, "interrupted by user")]
    await harness.replay(run_id)

    await harness.runs.resume(run_id)
    result = await harness.result(run_id)
    assert result.status == "completed"
    events = await harness.events(run_id)
    answers = {
        e.tool_call_id: e.content
        for e in events
        if e.type == "ToolCompleted" and e.node_id == "lead"
    }
    assert json.loads(answers["call-again"])["output"] == {"summary": "second try"}
    await harness.replay(run_id)
