"""A workflow's own budget on the dev server: the run pauses at it, a raise lets it finish,
and its history replays."""

from __future__ import annotations

import pytest

from openflow.contracts import Action
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")

READ = {"name": "read", "args": {"path": "notes.txt"}}


async def test_the_workflows_token_budget_pauses_and_a_raise_finishes_the_run(
    harness: Harness,
) -> None:
    harness.script({"work": [{"tools": [READ]}, {"submit": {"summary": "done"}}]})
    wf = make_workflow([node("work")], [], budget={"maxTokens": 50})
    run_id = await harness.start(wf)
    state = await harness.wait_for(run_id, lambda s: s["status"] == "paused")
    assert state["statusByNode"]["work"] == "failed"
    assert "tokens spent" in state["lastError"] and "--max-tokens N" in state["lastError"]
    spent = state["usage"]["run"]["inputTokens"] + state["usage"]["run"]["outputTokens"]
    assert spent >= 50
    await harness.runs.act(run_id, Action(kind="budget", max_tokens=1_000_000))
    result = await harness.result(run_id)
    assert result.status == "completed" and result.outputs["work"] == {"summary": "done"}
    await harness.replay(run_id)
