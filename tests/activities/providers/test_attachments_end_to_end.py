"""Attachments through a whole run on the Temporal dev server, to providers served locally.

An image given with the entrypoint reaches Anthropic's wire as an image block; an image and a
text file given with a person's answer reach OpenAI's Responses wire as an `input_image` part
and text. Neither file's bytes are in the run's history: it carries references only.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MARKER_KEY
from temporalio.client import Client
from test_provider_attachments import PNG
from wire import anthropic_sse, responses_sse
from wire.server import WireResponse, WireServer
from wire.turns import FakeCall, FakeTurn

# The SDKs are imported here, not on a worker's first call (which a busy machine can slow past
# the heartbeat timeout, and a retried call would take the next planned reply).
import openflow.activities.providers.anthropic_messages  # noqa: F401
import openflow.activities.providers.openai_responses  # noqa: F401
from openflow.attachments import Upload
from openflow.client import Runs
from openflow.contracts import Action
from openflow.engine import WorkflowRunState
from openflow.engine.events import RunStarted
from openflow.engine.harness import REQUEST_INPUT_TOOL, SUBMIT_TOOL
from openflow.engine.spec import Workflow
from openflow.testing import agent_node
from openflow.worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

SUBMIT = json.dumps({"output": {"summary": "a green dot"}, "assistant_message": "Seen."})
ENCODED = base64.b64encode(PNG).decode()


def one_node(provider: str, model: str, **agent: Any) -> Workflow:
    return Workflow.model_validate(
        {
            "id": f"wf-attach-{provider}",
            "name": "Attachments",
            "nodes": [agent_node("look", model=model, providerId=provider, **agent)],
            "edges": [],
        }
    )


class ReplyingServer(WireServer):
    """A wire server whose reply depends on the request, so a retried call gets the same one
    (a loaded machine can retry a first call when its heartbeat is late)."""

    def __init__(self) -> None:
        super().__init__()
        self.reply: Callable[[dict[str, Any]], WireResponse] | None = None

    def _record(self, handler: Any, body: bytes) -> None:
        super()._record(handler, body)
        if self.reply is not None:
            self.plan(self.reply(json.loads(body)))


@pytest.fixture
def server() -> Iterator[ReplyingServer]:
    served = ReplyingServer()
    served.start()
    yield served
    served.stop()


def settings(home: Path, provider: str, base_url: str) -> None:
    data = {
        "active_provider": provider,
        "providers": {provider: {"base_url": base_url, "api_key": MARKER_KEY}},
    }
    (home / "settings.json").write_text(json.dumps(data), encoding="utf-8")


async def wait_state(
    runs: Runs, run_id: str, predicate: Callable[[WorkflowRunState], object]
) -> WorkflowRunState:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    last: WorkflowRunState | None = None
    while loop.time() < deadline:
        try:
            last = await runs.state(run_id)
        except Exception:  # noqa: BLE001 - the run may not have taken its first task yet
            last = None
        if last is not None and predicate(last):
            return last
        await asyncio.sleep(0.05)
    shown = json.dumps(last.as_json())[:1500] if last is not None else "none answered"
    raise AssertionError(f"condition not reached: {shown}")


async def test_an_entrypoint_image_reaches_anthropic_as_an_image_block(
    client: Client, task_queue: str, openflow_home: Path, server: ReplyingServer
) -> None:
    settings(openflow_home, "anthropic", server.base_url)
    submit = anthropic_sse.encode(
        FakeTurn(calls=[FakeCall("toolu_1", SUBMIT_TOOL, SUBMIT)]), "claude-sonnet-4-6"
    )
    server.reply = lambda body: submit
    runs = Runs(client, task_queue)
    async with build_worker(client, task_queue, openflow_home):
        run_id = await runs.start(
            one_node("anthropic", "claude-sonnet-4-6"),
            entrypoint="What is in the picture?",
            attachments=[Upload("chart.png", PNG)],
        )
        handle = client.get_workflow_handle(run_id)
        await asyncio.wait_for(handle.result(), 60)
        state = await runs.state(run_id)
        events = await runs.events(run_id)
        history = json.dumps((await handle.fetch_history()).to_json_dict())

    assert state.outputs == {"look": {"summary": "a green dot"}}
    # The node's call (the post-run review's, on the same provider, carries no files).
    first = server.requests[0].json()["messages"][0]
    [image] = [block for block in first["content"] if block["type"] == "image"]
    assert image["source"] == {"type": "base64", "media_type": "image/png", "data": ENCODED}
    # The node's input names the attachment (spec 2.4 `input.entrypoint.attachments`).
    assert '"name": "chart.png"' in first["content"][0]["text"]
    [started] = [e for e in events if isinstance(e, RunStarted)]
    [ref] = started.attachments
    assert ref.name == "chart.png" and ref.media_type == "image/png"
    assert ref.size_bytes == len(PNG) and ref.uri == f"run://attachments/{ref.sha256}"
    assert ENCODED not in history
    stored = openflow_home / "runs" / run_id / "attachments" / str(ref.sha256)
    assert stored.read_bytes() == PNG


async def test_files_given_with_an_answer_reach_openai_responses(
    client: Client, task_queue: str, openflow_home: Path, server: ReplyingServer
) -> None:
    settings(openflow_home, "openai", server.base_url)
    ask = json.dumps({"assistant_message": "Send me the picture."})
    asking = responses_sse.encode(
        FakeTurn(calls=[FakeCall("call_1", REQUEST_INPUT_TOOL, ask)]), "gpt-4o-mini"
    )
    submit = responses_sse.encode(
        FakeTurn(calls=[FakeCall("call_2", SUBMIT_TOOL, SUBMIT)]), "gpt-4o-mini"
    )

    def reply(body: dict[str, Any]) -> WireResponse:
        answered = any(isinstance(item.get("content"), list) for item in body["input"])
        return submit if answered else asking

    server.reply = reply
    runs = Runs(client, task_queue)
    async with build_worker(client, task_queue, openflow_home):
        run_id = await runs.start(
            one_node("openai", "gpt-4o-mini", requestUserInput=True), entrypoint="look"
        )
        await wait_state(runs, run_id, lambda s: s.awaiting_node_ids == ["look"])
        await runs.act(
            run_id,
            Action(kind="input", node_id="look", text="Here it is."),
            [Upload("photo.png", PNG), Upload("notes.md", b"# Notes\nbe kind\n")],
        )
        handle = client.get_workflow_handle(run_id)
        await asyncio.wait_for(handle.result(), 60)
        state = await runs.state(run_id)
        history = json.dumps((await handle.fetch_history()).to_json_dict())

    assert state.outputs == {"look": {"summary": "a green dot"}}
    [answered] = [
        item
        for request in server.requests
        for item in request.json()["input"]
        if isinstance(item.get("content"), list)
    ][:1]
    assert answered["role"] == "user"
    parts = {part["type"]: part for part in answered["content"]}
    assert parts["input_image"]["image_url"] == f"data:image/png;base64,{ENCODED}"
    text = parts["input_text"]["text"]
    assert text.startswith("Here it is.")
    assert "Attachment notes.md (text/markdown):\n# Notes\nbe kind" in text
    # The person's message in the node's chat names its files; history holds no bytes.
    [said] = [m for m in state.chat_logs["look"] if m.content == "Here it is."]
    assert [a.name for a in said.attachments] == ["photo.png", "notes.md"]
    assert ENCODED not in history and "be kind" not in history
