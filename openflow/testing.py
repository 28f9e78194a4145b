"""Test your workflows: run one on a local Temporal server with scripted turns and people.

    async with LocalRuns() as runs:
        result = await runs.run(workflow, script={"plan": [{"submit": {...}}]},
                                inputs=[("idea", "a todo app")], approvals=[("", True)])
        assert result.status == "completed"

This is the durable equivalent of OpenFlow's headless runner (spec 14.1): scripted inputs are
given FIFO per node when a node waits, scripted approvals (empty id = any) when a batch waits,
and failed nodes are retried only when the error is transient or a timeout.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

from openflow import contracts as c
from openflow.client import Runs
from openflow.engine import RunEvent, WorkflowRunState
from openflow.engine.events import RunReport
from openflow.engine.spec import Workflow
from openflow.payloads import data_converter as pydantic_data_converter
from openflow.server import EmbeddedServer, free_port
from openflow.worker import build_worker


def agent_node(node_id: str, **agent: Any) -> dict[str, Any]:
    """A workflow node as JSON, like OpenFlow's test fixture: JSON handoff, `{summary}` output.

    Keyword arguments override fields of the node's `agent` config (OpenFlow's keys).
    """
    config: dict[str, Any] = {
        "system_prompt": "You are a test node.",
        "task_prompt": f"Do {node_id}.",
        "model": "test-model",
        "output_schema": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"],
        },
    }
    config.update(agent)
    return {
        "id": node_id,
        "label": node_id.title(),
        "kind": "agent",
        "position": {"x": 0, "y": 0},
        "agent": config,
    }


class HeadlessError(Exception):
    """The run needed something the test did not script (MissingManualInput and friends)."""


@dataclass
class RunOutcome:
    run_id: str
    status: str
    state: WorkflowRunState
    events: list[RunEvent]
    outputs: dict[str, Any] = field(default_factory=dict)

    def events_of(self, type_: str) -> list[RunEvent]:
        return [e for e in self.events if e.type == type_]

    @property
    def report(self) -> RunReport | None:
        """The run report of a completed run: outputs, usage, the post-run review's suggestions."""
        return self.state.last_report


def write_scripted_settings(
    home: Path, script: Mapping[str, Sequence[Mapping[str, Any]]], exhausted: str | None = "echo"
) -> None:
    """A settings.json whose active provider is a scripted profile with `script`."""
    home.mkdir(parents=True, exist_ok=True)
    settings_path = home / "settings.json"
    data: dict[str, Any] = {}
    if settings_path.exists():
        data = json.loads(settings_path.read_text())
    profile: dict[str, Any] = {"kind": "scripted", "default_model": "test-model", "script": script}
    if exhausted:
        profile["exhausted"] = exhausted
    data.setdefault("providers", {})["scripted"] = profile
    data["active_provider"] = "scripted"
    settings_path.write_text(json.dumps(data, indent=2))


async def drive(
    runs: Runs,
    run_id: str,
    inputs: Iterable[tuple[str, str]] = (),
    approvals: Iterable[tuple[str, bool]] = (),
    max_retries: int | None = None,
    timeout: float = 60.0,
) -> RunOutcome:
    """Answer a run's pauses from the script until it ends; raise when something is missing."""
    queued: dict[str, list[str]] = {}
    for node_id, text in inputs:
        queued.setdefault(node_id, []).append(text)
    decisions = list(approvals)
    retries: dict[str, int] = {}
    handle = runs.client.get_workflow_handle(run_id)
    deadline = time.monotonic() + timeout
    while True:
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            break
        state = await runs.state(run_id)
        acted = False
        for node_id in state.awaiting_node_ids:
            if not queued.get(node_id):
                raise HeadlessError(f"missing manual input for node {node_id!r}")
            await runs.act(run_id, c.Action(kind="input", node_id=node_id, text=queued[node_id][0]))
            queued[node_id].pop(0)
            acted = True
        for pending in state.pending_approvals:
            approval_id = pending.approval_id
            match = next((d for d in decisions if d[0] in ("", approval_id)), None)
            if match is None:
                raise HeadlessError(f"missing approval for {approval_id!r}")
            decisions.remove(match)
            await runs.act(
                run_id, c.Action(kind="approval", approval_id=approval_id, allow=match[1])
            )
            acted = True
        for node_id, status in state.status_by_node.items():
            if status not in ("failed", "interrupted") or not state.active:
                continue
            error = state.last_error or ""
            transient = error.startswith("transient:") or "timeout" in error or "timed out" in error
            retries[node_id] = retries.get(node_id, 0) + 1
            limit = max_retries if max_retries is not None else 3
            if status == "failed" and not (transient and retries[node_id] <= limit):
                raise HeadlessError(f"node {node_id!r} failed and needs a retry: {error}")
            await runs.act(run_id, c.Action(kind="retry", node_id=node_id))
            acted = True
        if time.monotonic() > deadline:
            raise HeadlessError(f"run {run_id!r} did not finish within {timeout:.0f}s")
        if not acted:
            await asyncio.sleep(0.05)
    state = await runs.state(run_id)
    events = await runs.events(run_id)
    return RunOutcome(
        run_id=run_id,
        status=state.status,
        state=state,
        events=events,
        outputs=dict(state.outputs),
    )


class LocalRuns:
    """A throwaway Temporal server, worker and OPENFLOW_HOME for running workflows in tests."""

    def __init__(
        self,
        client: Client | None = None,
        home: Path | None = None,
        task_queue: str | None = None,
    ) -> None:
        self._client = client
        self._own_home = home is None
        self.home = home or Path(tempfile.mkdtemp(prefix="openflow-test-"))
        self.task_queue = task_queue or f"openflow-test-{uuid.uuid4()}"
        self._server: EmbeddedServer | None = None
        self._worker: Any = None
        self._worker_task: asyncio.Task[None] | None = None

    @property
    def client(self) -> Client:
        assert self._client is not None, "use LocalRuns in `async with`"
        return self._client

    @property
    def runs(self) -> Runs:
        """The runs of this kit's worker and task queue."""
        return Runs(self.client, self.task_queue)

    async def __aenter__(self) -> LocalRuns:
        if self._client is None:
            self._server = EmbeddedServer(
                self.home, address=f"127.0.0.1:{free_port()}", ui_port=free_port()
            )
            await self._server.start()
            self._client = await self._server.connect(data_converter=pydantic_data_converter)
        self._worker = build_worker(self.client, self.task_queue, self.home)
        self._worker_task = asyncio.create_task(self._worker.run())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._worker is not None:
            await self._worker.shutdown()
        if self._server is not None:
            await self._server.stop()
        if self._own_home:
            shutil.rmtree(self.home, ignore_errors=True)

    async def run(
        self,
        workflow: Workflow,
        *,
        entrypoint: str = "",
        script: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        exhausted: str | None = "echo",
        inputs: Iterable[tuple[str, str]] = (),
        approvals: Iterable[tuple[str, bool]] = (),
        project_dir: str | None = None,
        timeout: float = 60.0,
    ) -> RunOutcome:
        """Start `workflow` and drive it to its end with the scripted turns and people."""
        if script is not None:
            write_scripted_settings(self.home, script, exhausted)
        runs = self.runs
        run_id = await runs.start(workflow, entrypoint=entrypoint, project_dir=project_dir)
        return await drive(runs, run_id, inputs, approvals, timeout=timeout)


__all__ = [
    "agent_node",
    "HeadlessError",
    "LocalRuns",
    "RunOutcome",
    "drive",
    "write_scripted_settings",
]
