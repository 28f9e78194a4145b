"""The post-run review on the real dev server: advice in the report, never a failed run."""

from __future__ import annotations

import asyncio

import pytest

from openflow.engine.events import Finished
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")

SUGGESTION = {
    "category": "prompt",
    "targetNodeId": "write",
    "title": "Name the audience",
    "evidence": "the draft had to guess who reads it",
    "recommendation": "Say who the notes are for in the task prompt.",
}


async def test_the_review_puts_its_suggestions_in_the_report(harness: Harness) -> None:
    harness.script(
        {
            "write": [{"submit": {"summary": "notes"}}],
            "__post_run_review": [{"submit": {"suggestions": [SUGGESTION]}}],
        }
    )
    run_id = await harness.start(make_workflow([node("write")], []))
    result = await harness.result(run_id)
    assert result.status == "completed"
    state = await harness.state(run_id)
    report = state.last_report
    assert report is not None
    assert report.suggestions_error is None
    assert [s.model_dump(mode="json") for s in report.suggestions] == [
        {
            "id": "suggestion-1",
            "category": "prompt",
            "target_node_id": "write",
            "title": "Name the audience",
            "evidence": "the draft had to guess who reads it",
            "recommendation": "Say who the notes are for in the task prompt.",
        }
    ]
    finished = [e for e in await harness.events(run_id) if isinstance(e, Finished)]
    assert finished[0].report.suggestions == report.suggestions
    await harness.replay(run_id)


async def test_stopping_a_run_during_its_review_leaves_it_completed(harness: Harness) -> None:
    harness.script(
        {
            "write": [{"submit": {"summary": "notes"}}],
            "__post_run_review": [{"message": "thinking", "delay_ms": 30_000}],
        }
    )
    run_id = await harness.start(make_workflow([node("write")], []))
    await harness.wait_for(run_id, lambda s: s.status_by_node["write"] == "completed")
    for _ in range(200):
        history = await harness.handle(run_id).fetch_history()
        if any(
            e.HasField("activity_task_scheduled_event_attributes")
            and b"post-run review" in e.user_metadata.summary.data
            for e in history.events
        ):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the review call was never scheduled")
    await asyncio.sleep(0.5)  # well inside its 30 s reply
    await harness.handle(run_id).cancel()
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs == {"write": {"summary": "notes"}}
    state = await harness.state(run_id)
    assert state.last_report.suggestions_error == "Post-run review was cancelled."
    await harness.replay(run_id)
