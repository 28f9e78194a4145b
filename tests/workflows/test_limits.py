"""A live run refuses texts over max_message_bytes from `act` and signals, and goes on."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowUpdateFailedError

from openflow.contracts import Action
from openflow.engine.events import ActionIgnored
from openflow.engine.limits import MAX_MESSAGE_BYTES
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_text_over_the_limit_is_rejected_or_ignored_and_the_run_completes(
    harness: Harness,
) -> None:
    harness.script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    run_id = await harness.start(make_workflow([node("ask", requestUserInput=True)], []))
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    handle = harness.handle(run_id)
    long = "x" * (MAX_MESSAGE_BYTES.value + 1)

    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await handle.execute_update("act", Action(kind="input", node_id="ask", text=long))
    assert "over the limit max_message_bytes" in str(rejected.value.cause)
    await handle.signal("submit_user_input", {"node_id": "ask", "text": long})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    ignored: list[ActionIgnored] = []
    while not ignored and loop.time() < deadline:
        ignored = [e for e in await harness.events(run_id) if isinstance(e, ActionIgnored)]
        await asyncio.sleep(0.05)
    assert len(ignored) == 1
    assert "over the limit max_message_bytes" in str(ignored[0].reason)
    assert len(str(ignored[0].action)) < 2_000
    assert (await harness.state(run_id)).awaiting_node_ids == ["ask"]

    await handle.signal("submit_user_input", {"node_id": "ask", "text": "Ada"})
    assert (await harness.result(run_id)).status == "completed"
    await harness.replay(run_id)
