"""A two-node run on the Temporal dev server, each node on a different provider served locally.

The draft node talks Anthropic Messages, the review node OpenAI Responses; both stream, and the
test watches their token deltas arrive on the live channel. The planted key reaches the servers
as credentials but never the run's history or events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MARKER_KEY
from temporalio.client import Client
from wire import anthropic_sse, responses_sse
from wire.server import WireServer
from wire.turns import FakeCall, FakeTurn

from openflow.client import Runs
from openflow.engine.events import UsageReported
from openflow.engine.harness import SUBMIT_TOOL
from openflow.engine.spec import Workflow
from openflow.live import FileLiveChannel
from openflow.worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
}


def submit(summary: str, message: str) -> str:
    return json.dumps({"output": {"summary": summary}, "assistant_message": message})


def workflow() -> Workflow:
    def node(node_id: str, provider: str, model: str) -> dict[str, Any]:
        return {
            "id": node_id,
            "label": node_id.title(),
            "kind": "agent",
            "position": {"x": 0, "y": 0},
            "agent": {
                "system_prompt": "You are a careful writer.",
                "task_prompt": f"{node_id.title()} the poem.",
                "model": model,
                "output_schema": SCHEMA,
                "providerId": provider,
            },
        }

    return Workflow.model_validate(
        {
            "id": "wf-two-providers",
            "name": "Two providers",
            "nodes": [
                node("draft", "anthropic", "claude-sonnet-4-6"),
                node("review", "openai", "gpt-4o-mini"),
            ],
            "edges": [{"id": "draft-review", "from": "draft", "to": "review"}],
        }
    )


@pytest.fixture
def servers() -> Iterator[tuple[WireServer, WireServer]]:
    anthropic_server, openai_server = WireServer().start(), WireServer().start()
    yield anthropic_server, openai_server
    anthropic_server.stop()
    openai_server.stop()


async def collect_deltas(
    live: FileLiveChannel, run_id: str, wanted: int, timeout: float = 20.0
) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = []

    async def read() -> None:
        async for event in live.subscribe(run_id, poll_interval=0.02):
            if event.get("type") == "ChatMessageDelta" and event.get("delta"):
                deltas.append(event)
                if len(deltas) >= wanted:
                    return

    await asyncio.wait_for(read(), timeout)
    return deltas


async def test_nodes_on_two_providers_stream_deltas_to_the_live_channel(
    client: Client,
    task_queue: str,
    openflow_home: Path,
    servers: tuple[WireServer, WireServer],
) -> None:
    anthropic_server, openai_server = servers
    anthropic_server.plan(
        anthropic_sse.encode(
            FakeTurn(
                text=["Drafting ", "the poem."],
                calls=[FakeCall("toolu_1", SUBMIT_TOOL, submit("draft ready", "Drafted."))],
            ),
            "claude-sonnet-4-6",
        )
    )
    openai_server.plan(
        responses_sse.encode(
            FakeTurn(
                text=["Reviewing ", "it."],
                calls=[FakeCall("call_1", SUBMIT_TOOL, submit("approved", "Reviewed."))],
            ),
            "gpt-4o-mini",
        )
    )
    settings = {
        "active_provider": "anthropic",
        "providers": {
            "anthropic": {"base_url": anthropic_server.base_url, "api_key": MARKER_KEY},
            "openai": {"base_url": openai_server.base_url, "api_key": MARKER_KEY},
        },
    }
    (openflow_home / "settings.json").write_text(json.dumps(settings), encoding="utf-8")

    async with build_worker(client, task_queue, openflow_home):
        runs = Runs(client, task_queue)
        run_id = await runs.start(workflow(), entrypoint="autumn")
        live = FileLiveChannel(openflow_home / "runs")
        deltas = await collect_deltas(live, run_id, wanted=4)
        handle = client.get_workflow_handle(run_id)
        await asyncio.wait_for(handle.result(), 60)
        state = await runs.state(run_id)
        events = await runs.events(run_id)
        # What the queries answer, field for field, for the secret scan below.
        raw_state = await runs.raw_state(run_id)
        raw_events = await runs.raw_events(run_id)
        history = await handle.fetch_history()

    assert state.status == "completed"
    assert state.outputs == {
        "draft": {"summary": "draft ready"},
        "review": {"summary": "approved"},
    }
    assert [(d["node_id"], d["delta"]) for d in deltas] == [
        ("draft", "Drafting "),
        ("draft", "the poem."),
        ("review", "Reviewing "),
        ("review", "it."),
    ]
    assert all(d["role"] == "assistant" for d in deltas)

    # Each node went to its own provider, with the key as credentials only.
    [draft_request] = anthropic_server.requests
    # The review node's call, then the post-run review on the last node's provider.
    review_request, post_run = openai_server.requests
    sent = json.dumps(post_run.json())
    # The review reads each node's whole conversation, which history does not carry.
    assert "runEvidence" in sent and "Drafting the poem." in sent
    assert draft_request.path == "/v1/messages"
    assert draft_request.headers["x-api-key"] == MARKER_KEY
    assert review_request.path == "/v1/responses"
    assert review_request.headers["authorization"] == f"Bearer {MARKER_KEY}"
    review_body = review_request.json()
    assert "draft ready" in review_body["input"][0]["content"]
    assert review_body["prompt_cache_key"].startswith("of_")

    usage = [e for e in events if isinstance(e, UsageReported)]
    assert {e.node_id for e in usage} - {"__post_run_review"} == {"draft", "review"}

    exported = json.dumps(history.to_json_dict())
    assert MARKER_KEY not in exported
    assert MARKER_KEY not in json.dumps(raw_events)
    assert MARKER_KEY not in json.dumps(raw_state)
