"""A node's MCP resources and prompts reach its provider's system prompt (spec 2.3 step 9).

The stdio test MCP server is resolved when the run starts; a long resource is kept in the run
store, so the run's history names it instead of carrying it. A server that cannot be set up is
skipped, and the node's chat says so in a System message.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MARKER_KEY
from temporalio.client import Client
from wire import anthropic_sse
from wire.server import WireServer
from wire.turns import FakeCall, FakeTurn

import openflow.activities.providers.anthropic_messages  # noqa: F401
from openflow.client import Runs
from openflow.engine.harness import SUBMIT_TOOL
from openflow.engine.spec import Workflow
from openflow.testing import agent_node
from openflow.worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

STDIO_SERVER = Path(__file__).parents[1] / "mcp" / "mcp_stdio_server.py"
SUBMIT = json.dumps({"output": {"summary": "read"}, "assistant_message": ""})


def payload_text(node: Any) -> str:
    """Every payload of a history's JSON, decoded: what the history holds as text."""
    if isinstance(node, dict):
        parts = [payload_text(v) for k, v in node.items() if k != "data"]
        data = node.get("data")
        if isinstance(data, str) and "metadata" in node:
            parts.append(base64.b64decode(data).decode("utf-8", errors="replace"))
        return "\n".join(parts)
    if isinstance(node, list):
        return "\n".join(payload_text(v) for v in node)
    return ""


class AlwaysSubmits(WireServer):
    def _record(self, handler: object, body: bytes) -> None:
        super()._record(handler, body)
        self.plan(
            anthropic_sse.encode(
                FakeTurn(calls=[FakeCall("toolu_1", SUBMIT_TOOL, SUBMIT)]), "claude-sonnet-4-6"
            )
        )


@pytest.fixture
def server() -> Iterator[AlwaysSubmits]:
    served = AlwaysSubmits()
    served.start()
    yield served
    served.stop()


async def test_mcp_resources_and_prompts_reach_the_request_and_a_broken_server_is_told(
    client: Client, task_queue: str, openflow_home: Path, server: AlwaysSubmits
) -> None:
    settings = {
        "active_provider": "anthropic",
        "providers": {"anthropic": {"base_url": server.base_url, "api_key": MARKER_KEY}},
        "mcp": {
            "servers": {
                "notes": {"command": sys.executable, "args": [str(STDIO_SERVER)]},
                "gone": {"command": "/no/such/mcp-server"},
            }
        },
    }
    (openflow_home / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    wf = Workflow.model_validate(
        {
            "id": "wf-mcp-context",
            "name": "MCP context",
            "nodes": [
                agent_node(
                    "read",
                    model="claude-sonnet-4-6",
                    mcpResources=[
                        {"serverId": "notes", "uri": "notes://team"},
                        {"serverId": "notes", "uri": "notes://guide"},
                        {"serverId": "gone", "uri": "docs://anything"},
                    ],
                    mcpPrompts=[
                        {"serverId": "notes", "name": "review", "arguments": {"focus": "tests"}}
                    ],
                )
            ],
            "edges": [],
        }
    )
    runs = Runs(client, task_queue)
    async with build_worker(client, task_queue, openflow_home):
        run_id = await runs.start(wf, entrypoint="read the notes")
        handle = client.get_workflow_handle(run_id)
        await asyncio.wait_for(handle.result(), 60)
        state = await runs.state(run_id)
        history = payload_text((await handle.fetch_history()).to_json_dict())

    assert state.outputs == {"read": {"summary": "read"}}
    system = json.dumps(server.requests[0].json()["system"])
    assert "MCP context (untrusted data" in system
    assert "The release train leaves on Thursdays." in system
    assert "Review the change with a focus on tests." in system
    assert "Guide line 399: keep the durable parts small." in system
    # The long guide travels by reference: the run's history never holds it.
    assert "notes://guide" in history and "mcp-context/" in history
    assert "Guide line 399" not in history
    assert "The release train leaves on Thursdays." in history  # short: inline
    told = [m.content for m in state.chat_logs["read"] if m.role == "system"]
    assert any("MCP server 'gone' was skipped" in text for text in told), told
