"""A workflow travels through history without its fields at their defaults and reads back
the same; a union's discriminator stays."""

from __future__ import annotations

import json

from openflow import contracts as c
from openflow.engine.spec import Workflow
from openflow.engine.wire import without_defaults


def _workflow(handoff: dict[str, object]) -> Workflow:
    node = {
        "id": "draft",
        "label": "Draft",
        "kind": "agent",
        "position": {"x": 0, "y": 0},
        "agent": {
            "system_prompt": "s",
            "task_prompt": "t",
            "model": "m",
            "output_schema": {"type": "object"},
            "handoff": handoff,
        },
    }
    return Workflow.model_validate({"id": "w", "name": "w", "nodes": [node], "edges": []})


def test_a_workflow_at_its_defaults_travels_small_and_reads_back_the_same() -> None:
    wf = _workflow({"format": "json"})
    whole = wf.model_dump(mode="json")
    slim = without_defaults(wf, whole)
    assert len(json.dumps(slim)) < len(json.dumps(whole)) / 2
    assert "settings" not in slim and "callableAgents" not in slim["nodes"][0]["agent"]
    assert Workflow.model_validate(slim) == wf
    run = c.RunInput(run_id="r", workflow=wf)
    assert c.RunInput.model_validate_json(run.model_dump_json()) == run


def test_a_markdown_handoff_keeps_its_format() -> None:
    wf = _workflow({"format": "markdown"})
    slim = without_defaults(wf, wf.model_dump(mode="json"))
    assert slim["nodes"][0]["agent"]["handoff"] == {"format": "markdown"}
    assert Workflow.model_validate(slim) == wf
