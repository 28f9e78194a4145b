"""Fixtures for runs on the real Temporal dev server: a worker per test and helpers to drive runs."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from openflow.client import Runs, parse_events, parse_state
from openflow.contracts import RunResult
from openflow.engine import RunEvent, WorkflowRunState
from openflow.engine.spec import Workflow
from openflow.testing import agent_node, write_scripted_settings
from openflow.worker import FAILURE_TYPES, build_worker, sandbox_runner
from openflow.workflows.notices import OpenFlowNotice
from openflow.workflows.run import OpenFlowRun

COMPAT = Path(__file__).resolve().parents[3] / "shared" / "compat"


node = agent_node

# Executions already replayed, as far as their history went, so the automatic replay skips them.
_REPLAYED: set[tuple[str, str, int]] = set()


def history_replayer() -> Replayer:
    """A replayer like the worker, but under Temporal's sandbox, which the worker runs without."""
    return Replayer(
        workflows=[OpenFlowRun, OpenFlowNotice],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
        workflow_failure_exception_types=FAILURE_TYPES,
    )


async def replay_history(history: WorkflowHistory) -> None:
    """Replay one history; fail on any nondeterminism."""
    if _replay_key(history) in _REPLAYED:
        return
    await history_replayer().replay_workflow(history)
    _REPLAYED.add(_replay_key(history))


def _replay_key(history: WorkflowHistory) -> tuple[str, str, int]:
    """One execution's history as far as it goes (its start event tells executions apart)."""
    started = hashlib.sha256(history.events[0].SerializeToString()).hexdigest()
    return (history.workflow_id, started, len(history.events))


async def replay_queue(client: Client, task_queue: str) -> int:
    """Replay every execution that ran on `task_queue`; how many there were."""
    found: dict[tuple[str, str], None] = {}
    async for execution in client.list_workflows(f'TaskQueue = "{task_queue}"'):
        found[(execution.id, execution.run_id)] = None
    # Visibility can trail the last execution of a run a little (a resume, a continue-as-new).
    for workflow_id in sorted({workflow_id for workflow_id, _ in found}):
        latest = await client.get_workflow_handle(workflow_id).describe()
        found[(workflow_id, latest.run_id)] = None
    for workflow_id, run_id in found:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        await replay_history(history)
    return len(found)


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

    async def state(self, run_id: str) -> WorkflowRunState:
        """The latest execution's `state` query, as the projection model."""
        return parse_state(await self.raw_state(run_id))

    async def raw_state(self, run_id: str) -> dict[str, Any]:
        """The `state` query's JSON as the latest execution answers it (its wire shape)."""
        return await self.handle(run_id).query("state", result_type=dict)

    async def events(self, run_id: str) -> list[RunEvent]:
        """The latest execution's own events (the `events` query after 0), as models."""
        return parse_events(await self.raw_events(run_id))

    async def raw_events(self, run_id: str) -> list[dict[str, Any]]:
        """The `events` query's JSON as the latest execution answers it (its wire shape)."""
        return await self.handle(run_id).query("events", {"after": 0}, result_type=list)

    async def wait_for(
        self,
        run_id: str,
        predicate: Callable[[WorkflowRunState], object],
        timeout: float = 30.0,
    ) -> WorkflowRunState:
        """Poll the state until `predicate(state)` holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: WorkflowRunState | None = None
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
            "condition not reached; last state: "
            + (json.dumps(last.as_json())[:2000] if last is not None else "none answered")
        )

    async def result(self, run_id: str, timeout: float = 60.0) -> RunResult:
        raw = await asyncio.wait_for(self.handle(run_id).result(), timeout)
        return RunResult.model_validate(raw)

    async def replay(self, run_id: str) -> None:
        """Replay the run's own history against the current workflow code (under the sandbox).

        Every execution a test ran on its task queue is replayed after the test anyway
        (`_replay_every_run`); this replays one now, at a moment the test chooses.
        """
        await replay_history(await self.handle(run_id).fetch_history())


@pytest_asyncio.fixture(loop_scope="session")
async def harness(client: Client, task_queue: str, openflow_home: Path) -> AsyncIterator[Harness]:
    worker = build_worker(client, task_queue, openflow_home)
    async with worker:
        yield Harness(client, task_queue, openflow_home)


@pytest_asyncio.fixture(loop_scope="session", autouse=True)
async def _replay_every_run(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[None]:
    """After each test, replay under the sandbox every execution it ran on its task queue.

    It runs after the test's worker has stopped and before its monkeypatches are undone, so a
    history replays against the code that recorded it.
    """
    yield
    await replay_queue(client, task_queue)
