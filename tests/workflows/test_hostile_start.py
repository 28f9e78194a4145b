"""A run started straight through Temporal with an input the worker cannot read fails at once."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from openflow import contracts as c
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


async def _status_within(client: Client, run_id: str, seconds: float) -> WorkflowExecutionStatus:
    handle = client.get_workflow_handle(run_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        status = (await handle.describe()).status
        if status != WorkflowExecutionStatus.RUNNING or loop.time() > deadline:
            return status
        await asyncio.sleep(0.1)


@pytest.mark.parametrize(
    "mangle",
    ["deep-schema", "not-an-object", "wrong-type", "no-argument"],
)
async def test_an_unreadable_start_fails_the_run_instead_of_leaving_it_running(
    harness: Harness, mangle: str
) -> None:
    wf = make_workflow([node("a")], [])
    raw: Any = c.RunInput(run_id="x", workflow=wf, entrypoint="go").model_dump(
        mode="json", by_alias=True
    )
    if mangle == "deep-schema":
        raw["workflow"]["nodes"][0]["outputSchema"] = _deep(400)
    elif mangle == "not-an-object":
        raw = ["not", "an", "input"]
    elif mangle == "wrong-type":
        raw["workflow"] = 5
    run_id = f"hostile-{uuid.uuid4().hex[:8]}"
    raw_client = await Client.connect(
        harness.client.service_client.config.target_host, namespace=harness.client.namespace
    )
    args = [] if mangle == "no-argument" else [raw]
    await raw_client.start_workflow(
        c.WORKFLOW_NAME,
        args=args,
        id=run_id,
        task_queue=harness.task_queue,
        task_timeout=c.WORKFLOW_TASK_TIMEOUT,
    )
    status = await _status_within(harness.client, run_id, 20)
    assert status == WorkflowExecutionStatus.FAILED, status
