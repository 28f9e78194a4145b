"""Model calls and tool batches in separate pools: slow model calls do not queue behind tools."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from openflow.client import Runs
from openflow.contracts import ACTIVITY_TOOL_BATCH, tool_task_queue
from openflow.pools import WorkerPools
from openflow.testing import write_scripted_settings
from openflow.worker import build_worker
from tests.workflows.conftest import make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")

DELAY_S = 4.0
RUNS = 20


async def test_slow_model_calls_run_together_far_beyond_the_tool_pool(
    client: Client, task_queue: str, openflow_home: Path
) -> None:
    write_scripted_settings(
        openflow_home,
        {
            "think": [{"submit": {"summary": "done"}, "delay_ms": int(DELAY_S * 1000)}],
            "write": [
                {"tools": [{"name": "write", "args": {"path": "note.txt", "content": "x"}}]},
                {"submit": {"summary": "written"}},
            ],
        },
    )
    thinking = make_workflow([node("think")], [])
    writing = make_workflow([node("write", tools={"approvalMode": "yolo"})], [])
    runs = Runs(client, task_queue)
    async with build_worker(client, task_queue, openflow_home, pools=WorkerPools(tool=2)):
        began = time.monotonic()
        ids = await asyncio.gather(*(runs.start(thinking, entrypoint="go") for _ in range(RUNS)))
        results = await asyncio.wait_for(
            asyncio.gather(*(client.get_workflow_handle(i).result() for i in ids)), 60
        )
        elapsed = time.monotonic() - began
        tool_run = await runs.start(writing, entrypoint="go")
        assert (await client.get_workflow_handle(tool_run).result())["status"] == "completed"
    assert [r["status"] for r in results] == ["completed"] * RUNS
    # Two at a time, as many as the tool pool runs, they would take ten delays; together they
    # take one, plus the orchestration of 20 runs (a few seconds on two busy cores).
    assert elapsed < 3 * DELAY_S, f"{RUNS} runs took {elapsed:.1f} s"
    history = await client.get_workflow_handle(tool_run).fetch_history()
    queues = {
        e.activity_task_scheduled_event_attributes.task_queue.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == ACTIVITY_TOOL_BATCH
    }
    assert queues == {tool_task_queue(task_queue)}
