"""Interrupting one node, resuming with a message, reverting an edit batch, on the dev server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from openflow import contracts as c
from openflow.client import ActionRejected, EditBatchNotFound, RunConflict
from openflow.engine import WorkflowRunState
from tests.workflows.conftest import Harness, make_workflow, node

YOLO = {"tools": {"approvalMode": "yolo"}}


def bash(command: str, call_id: str) -> dict[str, Any]:
    return {"tools": [{"name": "bash", "args": {"command": command}, "id": call_id}]}


def write(path: str, content: str, call_id: str) -> dict[str, Any]:
    return {"tools": [{"name": "write", "args": {"path": path, "content": content}, "id": call_id}]}


def running_tool(state: WorkflowRunState, node_id: str) -> bool:
    rows = state.tool_calls_by_node.get(node_id, [])
    return any(row.status == "running" for row in rows)


def user_lines(state: WorkflowRunState, node_id: str) -> list[str]:
    return [m.content for m in state.chat_logs.get(node_id, []) if m.role == "user"]


async def cancelled_batches(harness: Harness, run_id: str) -> int:
    history = await harness.handle(run_id).fetch_history()
    return sum(1 for e in history.events if e.HasField("activity_task_canceled_event_attributes"))


async def poll(check: Any, what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_an_interrupt_during_a_slow_bash_then_a_retry_with_a_message(
    harness: Harness, tmp_path: Path
) -> None:
    marker = tmp_path / "late.txt"
    harness.script(
        {
            "slow": [
                bash(f"sleep 30; echo late > {marker}", "call-slow"),
                {"submit": {"summary": "s"}},
            ],
            "other": [bash("sleep 1; echo other", "call-other"), {"submit": {"summary": "o"}}],
        }
    )
    wf = make_workflow([node("slow", **YOLO), node("other", **YOLO)], [])
    run_id = await harness.start(wf, project_dir=str(tmp_path))
    await harness.wait_for(run_id, lambda s: running_tool(s, "slow"))
    with pytest.raises(ActionRejected, match="unknown node 'nope'"):
        await harness.runs.interrupt(run_id, "nope")
    await harness.runs.interrupt(run_id, "slow")
    state = await harness.wait_for(
        run_id,
        lambda s: (
            s.status_by_node["slow"] == "interrupted" and s.status_by_node["other"] == "completed"
        ),
    )
    rows = state.tool_calls_by_node["slow"]
    assert [r.status for r in rows] != [] and not [r for r in rows if r.status == "running"]
    events = await harness.events(run_id)
    called = {e.tool_call.id for e in events if e.type == "ToolCallProposed"}
    answered = {e.tool_call_id for e in events if e.type == "ToolCompleted"}
    assert "call-slow" in called and called <= answered, "a call was left without a result"
    (closed,) = [e for e in events if e.type == "ToolCompleted" and e.tool_call_id == "call-slow"]
    assert "interrupted or cancelled" in closed.content
    # The batch's activity was cancelled and acknowledged it: its process tree was killed.
    await poll(lambda: _positive(cancelled_batches(harness, run_id)), "the cancelled batch")
    with pytest.raises(ActionRejected, match="already interrupted"):
        await harness.runs.interrupt(run_id, "slow")
    await harness.runs.act(run_id, c.Action(kind="retry", node_id="slow", message="skip the sleep"))
    result = await harness.result(run_id)
    assert result.status == "completed"
    state = await harness.state(run_id)
    assert user_lines(state, "slow")[-1] == "skip the sleep"
    assert not marker.exists()


async def _positive(count: Any) -> bool:
    return bool(await count)


async def test_a_resume_gives_the_node_its_message(harness: Harness, tmp_path: Path) -> None:
    harness.script({"slow": [bash("sleep 30", "call-slow"), {"submit": {"summary": "done"}}]})
    wf = make_workflow([node("slow", **YOLO)], [])
    run_id = await harness.start(wf, project_dir=str(tmp_path))
    await harness.wait_for(run_id, lambda s: running_tool(s, "slow"))
    await harness.runs.interrupt(run_id, "slow")
    await harness.wait_for(run_id, lambda s: s.status_by_node["slow"] == "interrupted")
    await harness.runs.stop(run_id)
    await harness.result(run_id)
    with pytest.raises(ActionRejected, match="unknown node 'nope'"):
        await harness.runs.resume(run_id, "nope", "hello")
    await harness.runs.resume(run_id, "slow", "carry on without sleeping")
    result = await harness.result(run_id)
    assert result.status == "completed"
    state = await harness.state(run_id)
    assert user_lines(state, "slow")[-1] == "carry on without sleeping"


async def test_a_revert_restores_a_file_and_is_refused_after_a_later_edit(
    harness: Harness, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("before a\n")
    (tmp_path / "b.txt").write_text("before b\n")
    harness.script(
        {
            "edit": [
                write("a.txt", "after a\n", "call-a"),
                write("b.txt", "after b\n", "call-b"),
                write("new.txt", "brand new\n", "call-new"),
                {"ask": "Anything else?"},
                {"submit": {"summary": "edited"}},
            ]
        }
    )
    wf = make_workflow([node("edit", requestUserInput=True, **YOLO)], [])
    run_id = await harness.start(wf, project_dir=str(tmp_path))
    state = await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["edit"])
    by_call = {b.tool_call_id: b.batch_id for b in state.edit_batches}
    assert len(by_call) == 3
    assert await harness.runs.revert(run_id, by_call["call-a"]) == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "before a\n"
    assert await harness.runs.revert(run_id, by_call["call-new"]) == ["new.txt"]
    assert not (tmp_path / "new.txt").exists()
    (tmp_path / "b.txt").write_text("edited by hand\n")
    with pytest.raises(RunConflict, match="'b.txt' has changed since"):
        await harness.runs.revert(run_id, by_call["call-b"])
    assert (tmp_path / "b.txt").read_text() == "edited by hand\n"
    with pytest.raises(EditBatchNotFound, match="no edit batch 'nope'"):
        await harness.runs.revert(run_id, "nope")
    with pytest.raises(EditBatchNotFound):
        await harness.runs.revert(run_id, by_call["call-a"])
    state = await harness.state(run_id)
    assert [b.tool_call_id for b in state.edit_batches] == ["call-b"]
    trace = [t.message for t in state.run_trace]
    assert any(m.startswith(f"reverted edit batch {by_call['call-a']}") for m in trace)
    assert any("refused" in m and "'b.txt'" in m for m in trace)
    events = await harness.events(run_id)
    assert len([e for e in events if e.type == "EditBatchReverted"]) == 3
    await harness.runs.act(
        run_id,
        c.Action(kind="input", node_id="edit", text="no"),
    )
    assert (await harness.result(run_id)).status == "completed"
    # A finished run is reverted from its checkpoint, by the caller.
    (tmp_path / "b.txt").write_text("after b\n")
    assert await harness.runs.revert(run_id, by_call["call-b"]) == ["b.txt"]
    assert (tmp_path / "b.txt").read_text() == "before b\n"
    with pytest.raises(EditBatchNotFound):
        await harness.runs.revert(run_id, by_call["call-b"])
    with pytest.raises(EditBatchNotFound):
        await harness.runs.revert(run_id, by_call["call-a"])


async def test_an_interrupt_during_a_slow_model_call_then_a_retry(
    harness: Harness, tmp_path: Path
) -> None:
    harness.script(
        {
            "think": [
                {"submit": {"summary": "too late"}, "delay_ms": 30_000},
                {"submit": {"summary": "on retry"}},
            ]
        }
    )
    wf = make_workflow([node("think")], [])
    run_id = await harness.start(wf, project_dir=str(tmp_path))
    await harness.wait_for(run_id, lambda s: s.status_by_node["think"] == "started")
    await harness.runs.interrupt(run_id, "think")
    await harness.wait_for(run_id, lambda s: s.status_by_node["think"] == "interrupted")
    await harness.runs.act(run_id, c.Action(kind="retry", node_id="think", message="now"))
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["think"] == {"summary": "on retry"}
    assert user_lines(await harness.state(run_id), "think")[-1] == "now"
