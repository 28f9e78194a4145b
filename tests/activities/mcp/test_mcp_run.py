"""A workflow node calls MCP tools over stdio and HTTP in a run on the Temporal dev server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from mcp_support import HttpMcp, stdio_config, write_mcp_settings
from temporalio.client import Client
from temporalio.worker import Replayer

from openflow import contracts as c
from openflow.client import Runs
from openflow.engine.events import ToolApprovalRequested, ToolCompleted
from openflow.testing import write_scripted_settings
from openflow.worker import build_worker, sandbox_runner
from openflow.workflows.run import OpenFlowRun
from tests.workflows.conftest import make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")

ADD = "mcp_4_calc_add"
LOOKUP = "mcp_3_web_lookup"


async def test_a_node_calls_mcp_tools_and_reads_their_results(
    client: Client, task_queue: str, openflow_home: Path, http_mcp: HttpMcp
) -> None:
    write_scripted_settings(
        openflow_home,
        {
            "ask": [
                {
                    "tools": [
                        {"name": ADD, "args": {"a": 2, "b": 3}},
                        {"name": LOOKUP, "args": {"word": "durable"}},
                    ]
                },
                {"submit": {"summary": "done"}},
            ]
        },
        exhausted=None,
    )
    write_mcp_settings(
        openflow_home,
        {"calc": stdio_config(), "web": http_mcp.config(), "gone": {"command": "/no/such/mcp"}},
    )
    wf = make_workflow([node("ask", tools={"approvalMode": "yolo"})], [])
    async with build_worker(client, task_queue, openflow_home):
        runs = Runs(client, task_queue)
        run_id = await runs.start(wf, entrypoint="use the tools")
        handle = client.get_workflow_handle(run_id)
        result = c.RunResult.model_validate(await asyncio.wait_for(handle.result(), 60))
        events = await runs.events(run_id)
        history = await handle.fetch_history()
    assert result.status == "completed"
    completed = {e.tool_name: e for e in events if isinstance(e, ToolCompleted)}
    assert (completed[ADD].content, completed[ADD].is_error) == ("5", False)
    assert completed[LOOKUP].content == "durable: found"
    catalog = json.loads((openflow_home / "runs" / run_id / "catalog.json").read_text())
    pinned = {e["name"]: e["mcp"] for e in catalog if "mcp" in e}
    assert pinned[ADD]["server_id"] == "calc" and pinned[LOOKUP]["tool"] == "lookup"
    assert not any(e["mcp"]["server_id"] == "gone" for e in catalog if "mcp" in e)
    replayer = Replayer(
        workflows=[OpenFlowRun],
        data_converter=client.data_converter,
        workflow_runner=sandbox_runner(),
    )
    await replayer.replay_workflow(history)


async def test_tools_of_a_server_marked_read_run_without_asking(
    client: Client, task_queue: str, openflow_home: Path, http_mcp: HttpMcp
) -> None:
    write_scripted_settings(
        openflow_home,
        {
            "ask": [
                {"tools": [{"name": ADD, "args": {"a": 2, "b": 3}, "id": "call-add"}]},
                {"tools": [{"name": LOOKUP, "args": {"word": "durable"}, "id": "call-look"}]},
                {"submit": {"summary": "done"}},
            ]
        },
        exhausted=None,
    )
    # calc says its tools only read; web says nothing, so its tools are writes (as by default).
    write_mcp_settings(
        openflow_home, {"calc": stdio_config(policy={"tier": "read"}), "web": http_mcp.config()}
    )
    wf = make_workflow([node("ask")], [])  # approval mode "write": reads pass, writes ask
    async with build_worker(client, task_queue, openflow_home):
        runs = Runs(client, task_queue)
        run_id = await runs.start(wf, entrypoint="use the tools")
        for _ in range(400):
            state = await runs.state(run_id)
            if state.pending_approvals:
                break
            await asyncio.sleep(0.05)
        [pending] = state.pending_approvals
        assert [call.id for call in pending.tool_calls] == ["call-look"]
        await runs.act(
            run_id, c.Action(kind="approval", approval_id=pending.approval_id, allow=True)
        )
        handle = client.get_workflow_handle(run_id)
        result = c.RunResult.model_validate(await asyncio.wait_for(handle.result(), 60))
        events = await runs.events(run_id)
    assert result.status == "completed"
    asked = [e for e in events if isinstance(e, ToolApprovalRequested)]
    assert len(asked) == 1 and asked[0].request.tier == "write"
    completed = {e.tool_call_id: e.content for e in events if isinstance(e, ToolCompleted)}
    assert completed == {"call-add": "5", "call-look": "durable: found"}
