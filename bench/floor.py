"""The bare floor: what one workflow step costs on the embedded server before OpenFlow adds anything.

A step is one no-op activity scheduled, run and completed. The floor is measured on the dev
server as shipped and with OpenFlow's tuning, side by side, plus the time to replay a bare
history per activity. Other benchmarks import `start_server` and `bare_workflow_ms_per_step`
to compare `OpenFlowRun` against this floor.

    python -m bench.floor [--steps 200] [--replay-steps 500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

with workflow.unsafe.imports_passed_through():
    from temporalio.contrib.pydantic import pydantic_data_converter

    from openflow.server import EmbeddedServer, free_port

__all__ = [
    "BareWorkflow",
    "bare_workflow_ms_per_step",
    "main",
    "noop",
    "replay_ms_per_activity",
    "start_server",
]


@activity.defn(name="floor_noop")
async def noop() -> None:
    """Do nothing: the activity whose cost is pure orchestration."""


@workflow.defn(name="FloorBare")
class BareWorkflow:
    """Run `steps` no-op activities one after the other."""

    @workflow.run
    async def run(self, steps: int) -> int:
        for _ in range(steps):
            await workflow.execute_activity(noop, start_to_close_timeout=timedelta(seconds=30))
        return steps


@asynccontextmanager
async def start_server(tuned: bool, home: Path | None = None) -> AsyncIterator[Client]:
    """Start a throwaway embedded server (tuned or as shipped) and yield a connected client."""
    with tempfile.TemporaryDirectory(prefix="openflow-bench-") as tmp:
        server = EmbeddedServer(
            home or Path(tmp),
            address=f"127.0.0.1:{free_port()}",
            ui=False,
            tuned=tuned,
        )
        async with server:
            yield await server.connect(data_converter=pydantic_data_converter)


async def _run_bare(client: Client, steps: int, task_queue: str) -> tuple[float, str]:
    started = time.perf_counter()
    handle = await client.start_workflow(
        BareWorkflow.run, steps, id=f"floor-{uuid.uuid4()}", task_queue=task_queue
    )
    await handle.result()
    return time.perf_counter() - started, handle.id


async def bare_workflow_ms_per_step(client: Client, n: int = 200, *, warmup: int = 10) -> float:
    """Run a bare workflow of `n` no-op activity steps and return milliseconds per step."""
    task_queue = f"floor-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[BareWorkflow], activities=[noop]):
        if warmup:
            await _run_bare(client, warmup, task_queue)
        elapsed, _ = await _run_bare(client, n, task_queue)
    return elapsed * 1000 / n


async def replay_ms_per_activity(client: Client, n: int = 500) -> float:
    """Run a bare `n`-activity workflow, then return the ms per activity to replay its history."""
    task_queue = f"floor-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[BareWorkflow], activities=[noop]):
        _, workflow_id = await _run_bare(client, n, task_queue)
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    replayer = Replayer(workflows=[BareWorkflow], data_converter=client.data_converter)
    started = time.perf_counter()
    await replayer.replay_workflow(history)
    return (time.perf_counter() - started) * 1000 / n


async def _floor(tuned: bool, steps: int, rounds: int) -> list[float]:
    async with start_server(tuned) as client:
        return [await bare_workflow_ms_per_step(client, steps) for _ in range(rounds)]


async def _main(steps: int, replay_steps: int, rounds: int) -> None:
    shipped = await _floor(False, steps, rounds)
    tuned = await _floor(True, steps, rounds)
    async with start_server(True) as client:
        replay = await replay_ms_per_activity(client, replay_steps)
    shipped_ms, tuned_ms = statistics.median(shipped), statistics.median(tuned)
    print(f"bare floor, {steps} no-op activity steps, median of {rounds} rounds")
    print(f"  dev server as shipped : {shipped_ms:7.2f} ms/step  {_rounds(shipped)}")
    print(f"  dev server tuned      : {tuned_ms:7.2f} ms/step  {_rounds(tuned)}")
    print(f"  speed-up              : {shipped_ms / tuned_ms:7.2f}x")
    print(f"replay of a {replay_steps}-activity history: {replay:.3f} ms/activity")


def _rounds(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"


def main(argv: list[str] | None = None) -> int:
    """Print the bare floor, shipped vs tuned, and the replay cost per activity."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="activities per workflow")
    parser.add_argument("--replay-steps", type=int, default=500, help="activities to replay")
    parser.add_argument("--rounds", type=int, default=3, help="workflows per server")
    args = parser.parse_args(argv)
    asyncio.run(_main(args.steps, args.replay_steps, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
