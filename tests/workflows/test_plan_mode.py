"""Plan -> Execute on the real server: draft, approved seal, frozen packet for later nodes."""

from __future__ import annotations

import json

import pytest

from openflow.contracts import Action
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_plan_source_seals_with_approval_and_downstream_gets_the_packet(
    harness: Harness,
) -> None:
    packet = {"scope": "export", "slices": ["csv"]}
    harness.script(
        {
            "freeze": [
                {
                    "tools": [
                        {
                            "name": "write",
                            "args": {"path": "run://PLAN.md", "content": "# Plan\n- csv\n"},
                        }
                    ]
                },
                {"submit": {"summary": "too early"}},
                {
                    "tools": [
                        {"name": "openflow_write_plan_artifact", "args": {}, "id": "call-seal"}
                    ]
                },
                {"submit": packet},
            ],
            "build": [{"submit": {"summary": "built"}}],
        },
        exhausted=None,
    )
    schema = {
        "type": "object",
        "properties": {"scope": {"type": "string"}, "slices": {"type": "array"}},
    }
    wf = make_workflow(
        [node("freeze", requestUserInput=True, output_schema=schema), node("build")],
        [("freeze", "build")],
        planMode={"evidenceSourceNodeId": "freeze"},
    )
    run_id = await harness.start(wf)
    state = await harness.wait_for(run_id, lambda s: s.pending_approvals)
    assert state.plan_mode.phase == "planning"
    pending = state.pending_approvals[0]
    assert pending.tool_call.name == "openflow_write_plan_artifact"
    await harness.runs.act(
        run_id, Action(kind="approval", approval_id=pending.approval_id, allow=True)
    )
    result = await harness.result(run_id)
    assert result.status == "completed"
    state = await harness.state(run_id)
    assert state.plan_mode.phase == "execution"
    events = await harness.events(run_id)
    sealed = [e for e in events if e.type == "ToolCompleted" and e.tool_call_id == "call-seal"]
    assert len(sealed) == 1 and sealed[0].content.startswith("artifact:")
    header_files = list((harness.home / "runs" / run_id / "headers").iterdir())
    build_headers = [
        json.loads(p.read_text())
        for p in header_files
        if json.loads(p.read_text())["node_id"] == "build"
    ]
    assert build_headers, "the downstream node was never called"
    evidence = build_headers[0]["input"]["change_evidence_packet"]
    assert evidence["sourceNodeId"] == "freeze"
    assert evidence["content"] == packet
    await harness.replay(run_id)
