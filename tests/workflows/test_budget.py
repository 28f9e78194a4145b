"""A workflow's own budget on the dev server: the run pauses at it, a raise lets it finish,
and its history replays."""

from __future__ import annotations

import asyncio
import io

import pytest
from rich.console import Console

from openflow.cli.follow import Follower
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
    state = await harness.wait_for(run_id, lambda s: s.status == "paused")
    assert state.status_by_node["work"] == "failed"
    assert "tokens spent" in state.last_error and "--max-tokens N" in state.last_error
    spent = state.usage.run.input_tokens + state.usage.run.output_tokens
    assert spent >= 50
    await harness.runs.act(run_id, Action(kind="budget", max_tokens=1_000_000))
    result = await harness.result(run_id)
    assert result.status == "completed" and result.outputs["work"] == {"summary": "done"}
    await harness.replay(run_id)


async def test_the_interactive_follower_asks_for_a_larger_budget(harness: Harness) -> None:
    harness.script({"work": [{"tools": [READ]}, {"submit": {"summary": "done"}}]})
    wf = make_workflow([node("work")], [], budget={"maxTokens": 50})
    run_id = await harness.start(wf)
    answers = iter(["lots", "-5", "1000000"])
    asked: list[str] = []

    async def prompt(text: str) -> str:
        asked.append(text)
        return next(answers)

    out = io.StringIO()
    console = Console(file=out, width=200)
    follower = Follower(
        harness.runs, run_id, console, interactive=True, prompt=prompt, poll_interval=0.05
    )
    outcome = await asyncio.wait_for(follower.run(), 60)
    assert outcome.status == "completed"
    assert len(asked) == 3 and "new budget in tokens" in asked[0]
    assert "budget reached" in out.getvalue() and "give a positive number" in out.getvalue()
