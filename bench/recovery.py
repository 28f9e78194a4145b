"""Recovery figures: how fast a killed worker is replaced, and what a workflow task costs.

* the time from `kill -9` of the worker running a model turn to the next model turn being
  dispatched to another worker (the turn's scripted delay subtracted);
* workflow task times (median, p99, max) of a long one-node run, and the time a worker that
  takes it over needs to replay its longest execution from the start: this is what the workflow
  task timeout (`contracts.WORKFLOW_TASK_TIMEOUT`) must hold on a loaded worker.

    python -m bench.recovery [--kills 3] [--turns 1500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from openflow.backends import open_backends
from openflow.client import Runs
from openflow.contracts import WORKFLOW_TASK_TIMEOUT
from openflow.engine.spec import Workflow
from openflow.server import EmbeddedServer, free_port
from openflow.testing import agent_node, write_scripted_settings
from openflow.worker import build_worker
from openflow.workflows.run import OpenFlowRun

ROOT = Path(__file__).resolve().parents[1]
TURN_DELAY_MS = 1500


def _workflow() -> Workflow:
    return Workflow.model_validate(
        {"id": "bench", "name": "Recovery bench", "nodes": [agent_node("a")], "edges": []}
    )


def _spawn_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workflows.worker_main"],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    if b"worker ready" not in proc.stdout.readline():
        raise RuntimeError("the worker did not start")
    return proc


async def _started_activities(client: Client, run_id: str) -> list[str]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return [
        e.activity_task_started_event_attributes.identity
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]


async def _task_workers(client: Client, run_id: str) -> list[str]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return [
        e.workflow_task_started_event_attributes.identity
        for e in history.events
        if e.HasField("workflow_task_started_event_attributes")
    ]


async def kill_mid_turn(client: Client, env: dict[str, str], home: Path) -> float:
    """Seconds from killing the worker of a running model turn to the turn running elsewhere."""
    write_scripted_settings(home, {"a": [{"submit": {"summary": "x"}, "delay_ms": TURN_DELAY_MS}]})
    workers = [_spawn_worker(env), _spawn_worker(env)]
    try:
        runs = Runs(client, env["OPENFLOW_TASK_QUEUE"], store=open_backends(home).store)
        run_id = await runs.start(_workflow(), entrypoint="go")
        while True:
            state = await runs.state(run_id)
            if state.status_by_node.get("a") == "started":
                break
            await asyncio.sleep(0.02)
        # The turn's started event is written when it ends: its worker is the one whose task
        # scheduled it (a new run's first task, which also prepared it in a local activity),
        # as eager dispatch hands a task's activities to its own worker.
        identity = (await _task_workers(client, run_id))[-1]
        owner = next(w for w in workers if w.pid == int(identity.split("@")[0]))
        killed = time.monotonic()
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        while len(await _started_activities(client, run_id)) < 2:
            await asyncio.sleep(0.02)
        return time.monotonic() - killed - TURN_DELAY_MS / 1000
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def task_times(client: Client, home: Path, turns: int) -> None:
    """Workflow task times of a long run, and a full replay of its longest execution."""
    script = [{"tools": [{"name": "ls", "args": {"path": "."}}]} for _ in range(turns)]
    write_scripted_settings(home, {"a": [*script, {"submit": {"summary": "done"}}]})
    async with build_worker(client, "bench-tasks", home):
        runs = Runs(client, "bench-tasks", store=open_backends(home).store)
        run_id = await runs.start(_workflow(), entrypoint="go")
        await client.get_workflow_handle(run_id).result()
    times: list[float] = []
    longest = None
    async for execution in client.list_workflows(f'WorkflowId = "{run_id}"'):
        history = await client.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()
        started = {}
        for e in history.events:
            if e.HasField("workflow_task_started_event_attributes"):
                started[e.event_id] = e.event_time.ToDatetime()
            elif e.HasField("workflow_task_completed_event_attributes"):
                begun = started[e.workflow_task_completed_event_attributes.started_event_id]
                times.append((e.event_time.ToDatetime() - begun).total_seconds() * 1000)
        if longest is None or len(history.events) > len(longest.events):
            longest = history
    assert longest is not None
    times.sort()
    print(
        f"workflow tasks of a {turns}-turn run: {len(times)}, median {statistics.median(times):.1f}"
        f" ms, p99 {times[int(len(times) * 0.99)]:.1f} ms, max {times[-1]:.1f} ms"
    )
    replayer = Replayer(
        workflows=[OpenFlowRun],
        data_converter=pydantic_data_converter,
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    began = time.monotonic()
    await replayer.replay_workflow(longest)
    print(
        f"full replay of its longest execution ({len(longest.events)} events): "
        f"{time.monotonic() - began:.2f} s (workflow task timeout "
        f"{WORKFLOW_TASK_TIMEOUT.total_seconds():g} s)"
    )


async def main(kills: int, turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        server = EmbeddedServer(home, address=f"127.0.0.1:{free_port()}", ui=False)
        async with server:
            client = await server.connect(data_converter=pydantic_data_converter)
            env = {
                "OPENFLOW_HOME": str(home),
                "OPENFLOW_TEMPORAL_ADDRESS": server.address,
                "OPENFLOW_TASK_QUEUE": "bench-kill",
            }
            takeovers = [await kill_mid_turn(client, env, home) for _ in range(kills)]
            print(
                "kill -9 mid model turn, next turn dispatched to another worker after: "
                + ", ".join(f"{t:.2f} s" for t in takeovers)
            )
            await task_times(client, home, turns)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--turns", type=int, default=1500)
    args = parser.parse_args()
    asyncio.run(main(args.kills, args.turns))
