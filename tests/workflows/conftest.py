"""Fixtures for runs on the real Temporal dev server: a worker per test and helpers to drive runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer

from openflow.client import Runs
from openflow.contracts import RunResult
from openflow.engine.spec import Workflow
from openflow.testing import agent_node, write_scripted_settings
from openflow.worker import build_worker, sandbox_runner
from openflow.workflows.run import OpenFlowRun

COMPAT = Path(__file__).resolve().parents[3] / "shared" / "compat"


node = agent_node


def make_workflow(
    nodes: list[dict[str, Any]], edges: list[tuple[str, str]], **settings: Any
) -> Workflow:
    return Workflow.model_validate(
        {
            "id": "wf-test",
            "name": "Test workflow",
            "nodes": nodes,
            "edges": [{"id": f"{a}-{b}", "from": a, "to": b} for a, b in edges],
            "settings": settings,
        }
    )


class Harness:
    """One test's worker, home and runs."""

    def __init__(self, client: Client, task_queue: str, home: Path) -> None:
        self.client = client
        self.task_queue = task_queue
        self.home = home
        self.runs = Runs(client, task_queue)

    def script(
        self, script: dict[str, list[dict[str, Any]]], exhausted: str | None = "echo"
    ) -> None:
        write_scripted_settings(self.home, script, exhausted)

    async def start(self, wf: Workflow, entrypoint: str = "go", **kw: Any) -> str:
        return await self.runs.start(wf, entrypoint=entrypoint, **kw)

    def handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(run_id)

    async def state(self, run_id: str) -> dict[str, Any]:
        return await self.handle(run_id).query("state", result_type=dict)

    async def events(self, run_id: str) -> list[dict[str, Any]]:
        return await self.handle(run_id).query("events", {"after": 0}, result_type=list)

    async def wait_for(self, run_id: str, predicate: Any, timeout: float = 30.0) -> dict[str, Any]:
        """Poll the state until `predicate(state)` holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: dict[str, Any] = {}
        while loop.time() < deadline:
            try:
                last = await self.state(run_id)
            except Exception:  # noqa: BLE001 - the run may not have taken its first task yet
                await asyncio.sleep(0.05)
                continue
            if predicate(last):
                return last
            await asyncio.sleep(0.05)
        raise AssertionError(
            f"condition not reached; last status {last.get('status')!r}: {json.dumps(last)[:2000]}"
        )

    async def result(self, run_id: str, timeout: float = 60.0) -> RunResult:
        raw = await asyncio.wait_for(self.handle(run_id).result(), timeout)
        return RunResult.model_validate(raw)

    async def replay(self, run_id: str) -> None:
        """Replay the run's own history against the current workflow code."""
        history = await self.handle(run_id).fetch_history()
        replayer = Replayer(
            workflows=[OpenFlowRun],
            data_converter=self.client.data_converter,
            workflow_runner=sandbox_runner(),
        )
        await replayer.replay_workflow(history)


@pytest_asyncio.fixture(loop_scope="session")
async def harness(client: Client, task_queue: str, openflow_home: Path) -> AsyncIterator[Harness]:
    worker = build_worker(client, task_queue, openflow_home)
    async with worker:
        yield Harness(client, task_queue, openflow_home)
