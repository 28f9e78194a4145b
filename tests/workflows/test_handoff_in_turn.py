"""A node's handoff is stored by the model turn that submits it: one activity for that turn,
the handoff on disk for the next node; what a turn did not store `write_handoff` still does."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from openflow import contracts as c
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _scheduled(harness: Harness, run_id: str) -> list[tuple[str, str]]:
    """Each scheduled activity's type and, for a model turn, the call it made."""
    history = await harness.handle(run_id).fetch_history()
    found = []
    for event in history.events:
        if not event.HasField("activity_task_scheduled_event_attributes"):
            continue
        attrs = event.activity_task_scheduled_event_attributes
        call = ""
        if attrs.activity_type.name == "model_turn":
            # The call's id, or the activity's when that names it.
            data = json.loads(attrs.input.payloads[0].data)
            call = data.get("call_id") or c.activity_call_id(attrs.activity_id)
        found.append((attrs.activity_type.name, call))
    return found


def _transcript(harness: Harness, run_id: str, node_id: str) -> list[dict[str, Any]]:
    path = harness.home / "runs" / run_id / "transcripts" / f"{node_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_submitting_turn_stores_the_handoff_the_next_node_reads(harness: Harness) -> None:
    harness.script(
        {
            "alpha": [{"submit": {"summary": "alpha found 42"}}],
            "beta": [
                {
                    "tools": [
                        {"name": "read", "args": {"path": "run://handoffs/alpha/HANDOFF.json"}}
                    ]
                },
                {"submit": {"summary": "beta read it"}},
            ],
        },
        exhausted="echo",
    )
    wf = make_workflow(
        [node("alpha"), node("beta", tools={"approvalMode": "yolo"})], [("alpha", "beta")]
    )
    run_id = await harness.start(wf)
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["beta"] == {"summary": "beta read it"}
    scheduled = await _scheduled(harness, run_id)
    # alpha is one activity: its turn both replied and stored the handoff.
    assert [kind for kind, call in scheduled if "alpha" in call] == ["model_turn"]
    assert "write_handoff" not in [kind for kind, _ in scheduled]
    path = harness.home / "runs" / run_id / "handoffs" / "alpha" / "HANDOFF.json"
    data = path.read_bytes()
    assert json.loads(data) == {"summary": "alpha found 42"}
    # The manifest the run keeps names the file as it is on disk.
    manifest = (await harness.state(run_id)).handoffs["alpha"]
    assert manifest["uri"] == "run://handoffs/alpha/HANDOFF.json"
    assert manifest["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["sizeBytes"] == len(data)
    # beta got the manifest upstream and read the file through its URI.
    read = [i for i in _transcript(harness, run_id, "beta") if i["kind"] == "tool_result"]
    assert "alpha found 42" in read[0]["result"]["content"]
    await harness.replay(run_id)


async def test_markdown_handoff_is_stored_by_its_turn(harness: Harness) -> None:
    template = "# Handoff\n\n## Summary\n\n## Risks\n"
    text = "# Handoff\n\n## Summary\nAll good.\n\n## Risks\nNone.\n"
    harness.script(
        {"doc": [{"submit": {"markdown": text}, "say": "Wrote the brief."}]}, exhausted="echo"
    )
    wf = make_workflow([node("doc", handoff={"format": "markdown", "template": template})], [])
    run_id = await harness.start(wf)
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["doc"] == {"summary": "Wrote the brief."}
    path = harness.home / "runs" / run_id / "handoffs" / "doc" / "HANDOFF.md"
    assert path.read_text() == text
    assert (await harness.state(run_id)).handoffs["doc"]["mediaType"] == "text/markdown"
    assert "write_handoff" not in [kind for kind, _ in await _scheduled(harness, run_id)]


async def test_a_submission_its_turn_did_not_store_is_written_on_its_own(
    harness: Harness,
) -> None:
    # A malformed submission is stored by no turn; the repair model's fixed one completes
    # the node, and the handoff is written by `write_handoff` as before.
    fixed = {"output": {"summary": "fixed up"}, "assistant_message": "fixed"}
    harness.script(
        {
            "gamma": [{"submit": {"wrong": 1}}],
            "gamma__output_repair": [{"submit": {"repaired_arguments": fixed}}],
        },
        exhausted="echo",
    )
    wf = make_workflow([node("gamma")], [], outputRepairModel="repair-model")
    run_id = await harness.start(wf)
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["gamma"] == {"summary": "fixed up"}
    kinds = [kind for kind, _ in await _scheduled(harness, run_id)]
    assert kinds.count("write_handoff") == 1
    path = harness.home / "runs" / run_id / "handoffs" / "gamma" / "HANDOFF.json"
    assert json.loads(path.read_text()) == {"summary": "fixed up"}
