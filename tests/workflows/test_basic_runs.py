"""Runs end to end on the real Temporal dev server with the scripted provider."""

from __future__ import annotations

import pytest

from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_linear_run_completes_and_replays(harness: Harness) -> None:
    harness.script({}, exhausted="echo")
    wf = make_workflow([node("step-a"), node("step-b"), node("step-c")], [("step-a", "step-b"), ("step-b", "step-c")])
    run_id = await harness.start(wf, entrypoint="ship it")
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["step-c"] == {"summary": "ship it"}
    state = await harness.state(run_id)
    assert state["status"] == "completed"
    assert state["statusByNode"] == {"step-a": "completed", "step-b": "completed", "step-c": "completed"}
    events = await harness.events(run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "Finished"
    await harness.replay(run_id)
