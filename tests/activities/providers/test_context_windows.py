"""OpenFlow's bundled context windows (../shared/compat/legacy/context_window_sizes.json) fill
`max_context_tokens` in usage events and `contextWindowByNode` in the state."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MARKER_KEY
from temporalio.client import Client
from wire import responses_sse
from wire.server import WireServer
from wire.turns import FakeCall, FakeTurn

import openflow.activities.providers.openai_responses  # noqa: F401
from openflow.activities.providers import max_context_tokens
from openflow.client import Runs
from openflow.engine.events import UsageReported
from openflow.engine.harness import SUBMIT_TOOL
from openflow.engine.spec import Workflow
from openflow.settings import ProviderProfile
from openflow.testing import agent_node
from openflow.worker import build_worker

TABLE = (
    Path(__file__).resolve().parents[4]
    / "shared"
    / "compat"
    / "legacy"
    / "context_window_sizes.json"
)
needs_table = pytest.mark.skipif(not TABLE.is_file(), reason=f"no {TABLE}")
SUBMIT = json.dumps({"output": {"summary": "ok"}, "assistant_message": ""})


def table() -> dict[str, int]:
    return json.loads(TABLE.read_text()) if TABLE.is_file() else {}


@needs_table
def test_every_model_of_openflows_table_has_its_context_window() -> None:
    profile = ProviderProfile()
    got = {model: max_context_tokens(model, profile) for model in table()}
    assert got == table()


class AlwaysSubmits(WireServer):
    def _record(self, handler: Any, body: bytes) -> None:
        super()._record(handler, body)
        model = json.loads(body).get("model", "gpt-4-turbo")
        self.plan(
            responses_sse.encode(FakeTurn(calls=[FakeCall("c1", SUBMIT_TOOL, SUBMIT)]), model)
        )


@pytest.fixture
def server() -> Iterator[AlwaysSubmits]:
    served = AlwaysSubmits()
    served.start()
    yield served
    served.stop()


@needs_table
@pytest.mark.asyncio(loop_scope="session")
async def test_a_tabled_model_reports_its_window_in_usage_events_and_the_state(
    client: Client, task_queue: str, openflow_home: Path, server: AlwaysSubmits
) -> None:
    model = "gpt-4-turbo"
    data = {
        "active_provider": "openai",
        "providers": {"openai": {"base_url": server.base_url, "api_key": MARKER_KEY}},
    }
    (openflow_home / "settings.json").write_text(json.dumps(data), encoding="utf-8")
    wf = Workflow.model_validate(
        {
            "id": "wf-window",
            "name": "Window",
            "nodes": [agent_node("a", model=model, providerId="openai")],
            "edges": [],
        }
    )
    runs = Runs(client, task_queue)
    async with build_worker(client, task_queue, openflow_home):
        run_id = await runs.start(wf, entrypoint="go")
        await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
        state = await runs.state(run_id)
        events = await runs.events(run_id)
    used = [e for e in events if isinstance(e, UsageReported) and e.node_id == "a"]
    assert used and used[0].max_context_tokens == table()[model]
    window = state.context_window_by_node["a"]
    assert (window.max_tokens, window.model) == (table()[model], model)
