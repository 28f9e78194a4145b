"""Behaviours brought in line with OpenFlow: a failed node retried by an input, a message sent
during a node's last turn delivered, the run's folder and project in its state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openflow.contracts import Action
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")


def transcript(harness: Harness, run_id: str, node_id: str) -> list[dict[str, object]]:
    path = harness.home / "runs" / run_id / "transcripts" / f"{node_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_an_input_to_a_failed_node_retries_it_with_the_input_as_its_message(
    harness: Harness,
) -> None:
    harness.script(
        {"flaky": [{"error": "permanent", "message": "bad request"}, {"submit": {"summary": "ok"}}]}
    )
    run_id = await harness.start(make_workflow([node("flaky")], []))
    await harness.wait_for(run_id, lambda s: s.status_by_node["flaky"] == "failed")
    await harness.runs.act(
        run_id, Action(kind="input", node_id="flaky", text="use the smaller model")
    )
    result = await harness.result(run_id)
    assert result.status == "completed" and result.outputs["flaky"] == {"summary": "ok"}
    state = await harness.state(run_id)
    said = [m.content for m in state.chat_logs["flaky"] if m.role == "user"]
    assert "use the smaller model" in said
    users = [i for i in transcript(harness, run_id, "flaky") if i.get("kind") == "user_message"]
    assert any(i.get("content") == "use the smaller model" for i in users)


async def test_a_message_sent_during_the_last_turn_gets_a_turn_of_its_own(
    harness: Harness,
) -> None:
    harness.script(
        {
            "talk": [
                {"delay_ms": 3000, "submit": {"summary": "without the message"}},
                {"submit": {"summary": "with the message"}},
            ]
        }
    )
    wf = make_workflow([node("talk", requestUserInput=True)], [])
    run_id = await harness.start(wf)
    await harness.wait_for(run_id, lambda s: s.status_by_node["talk"] == "started")
    await harness.runs.act(
        run_id, Action(kind="message", node_id="talk", text="mention the budget too")
    )
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["talk"] == {"summary": "with the message"}
    users = [i for i in transcript(harness, run_id, "talk") if i.get("kind") == "user_message"]
    assert users[-1]["content"] == "mention the budget too"


async def test_the_state_names_the_execution_folder_and_the_project(
    harness: Harness, tmp_path: Path
) -> None:
    harness.script({})
    plain = await harness.start(make_workflow([node("a")], []))
    project = tmp_path / "project"
    project.mkdir()
    in_project = await harness.start(make_workflow([node("a")], []), project_dir=str(project))
    for run_id in (plain, in_project):
        assert (await harness.result(run_id)).status == "completed"
    state = await harness.state(plain)
    assert state.execution_cwd == str(harness.home / "runs" / plain / "workspace")
    assert state.project_id is None
    state = await harness.state(in_project)
    assert (state.execution_cwd, state.project_id) == (str(project), str(project))
