"""OpenFlowRun against the bare Temporal floor, side by side in one run on the embedded server.

    python -m bench.overhead [--turns 100] [--quick]

Prints:
- orchestration overhead of a zero-latency scripted model turn vs a bare no-op activity step;
- history events and bytes per model turn for a 10-turn and a 200-turn node with 2 KB messages;
- replay time of a 500-turn run vs a bare 500-activity workflow;
- time from kill -9 of the worker mid-turn to the run making progress on a new worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Replayer

from bench.floor import bare_workflow_ms_per_step, replay_ms_per_activity, start_server
from openflow.backends import open_backends
from openflow.client import Runs
from openflow.engine.spec import Workflow
from openflow.testing import write_scripted_settings
from openflow.worker import build_worker, workflow_runner
from openflow.workflows.run import OpenFlowRun

ROOT = Path(__file__).resolve().parents[1]
MESSAGE = ("The quick brown fox jumps over the lazy dog. " * 46)[:2048]


def _node(node_id: str, handoff: str = "legacy") -> dict[str, Any]:
    return {
        "id": node_id,
        "label": node_id,
        "kind": "agent",
        "position": {"x": 0, "y": 0},
        "agent": {
            "system_prompt": "bench",
            "task_prompt": "bench",
            "model": "bench-model",
            "output_schema": {"type": "object", "properties": {"summary": {"type": "string"}}},
            "handoff": {"format": handoff},
            "tools": {"approvalMode": "yolo"},
        },
    }


def chain(n: int) -> Workflow:
    """A chain of n legacy-handoff nodes: exactly one model-turn activity per node."""
    ids = [f"n{i:04d}" for i in range(n)]
    return Workflow.model_validate(
        {
            "id": "bench-chain",
            "name": "bench chain",
            "nodes": [_node(i) for i in ids],
            "edges": [
                {"id": f"e{i}", "from": a, "to": b}
                for i, (a, b) in enumerate(zip(ids, ids[1:], strict=False))
            ],
        }
    )


def single(node_id: str = "busy") -> Workflow:
    return Workflow.model_validate(
        {"id": "bench-one", "name": "bench one", "nodes": [_node(node_id)], "edges": []}
    )


def tool_turns(n: int, say: str = "", tool: str = "ls") -> list[dict[str, Any]]:
    """n turns that each call one tool (`ls`, a read; or `write`, a side effect), then a submit."""

    def call(i: int) -> dict[str, Any]:
        if tool == "write":
            return {"name": "write", "args": {"path": f"notes/{i}.txt", "content": f"note {i}"}}
        return {"name": tool, "args": {"path": "."}}

    turns: list[dict[str, Any]] = [{"tools": [call(i)], "say": say} for i in range(n)]
    return [*turns, {"submit": {"summary": "done"}, "say": say}]


async def _run(
    client: Client, home: Path, wf: Workflow, script: dict[str, Any], warmup: bool = True
) -> tuple[float, str]:
    """Run `wf` on a fresh worker, warmed up first like the floor's, and time it alone."""
    write_scripted_settings(home, script, exhausted="echo")
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    # The client stores each run's workflow where the workers read it (the bench's home).
    runs = Runs(client, queue, store=open_backends(home).store)
    async with build_worker(client, queue, home):
        if warmup:
            await client.get_workflow_handle(await runs.start(chain(3), entrypoint="x")).result()
        started = time.perf_counter()
        run_id = await runs.start(wf, entrypoint="bench")
        raw = await client.get_workflow_handle(run_id).result()
        elapsed = time.perf_counter() - started
    assert raw["status"] == "completed", raw.get("error")
    return elapsed, run_id


async def _history(client: Client, run_id: str) -> tuple[int, int, Any]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    size = sum(len(e.SerializeToString()) for e in history.events)
    return len(history.events), size, history


async def overhead(
    client: Client, home: Path, turns: int, rounds: int = 3
) -> list[tuple[float, float, float, float]]:
    """Per round, interleaved so both see the same machine: ms per turn of a chain of `turns`
    one-turn nodes and ms per bare step, each over the whole run; then the same per turn past the
    first tenth (what one more turn costs: a run's start, end and post-run review left out)."""
    await _run(client, home, chain(5), {})
    few = max(turns // 10, 2)
    rows = []
    for _ in range(rounds):
        ours, _ = await _run(client, home, chain(turns), {})
        ours_few, _ = await _run(client, home, chain(few), {})
        bare = await bare_workflow_ms_per_step(client, turns) * turns
        bare_few = await bare_workflow_ms_per_step(client, few) * few
        span = turns - few
        rows.append(
            (
                ours * 1000 / turns,
                bare / turns,
                (ours - ours_few) * 1000 / span,
                (bare - bare_few) / span,
            )
        )
    return rows


class NodeHistory:
    """History and transcript of one node's run of tool turns."""

    def __init__(self, turns: int, events: int, size: int, produced: int, text: int) -> None:
        self.turns = turns
        self.events = events
        self.size = size
        self.produced = produced
        self.text = text

    def per_turn(self, base: NodeHistory) -> tuple[float, float, float, float]:
        """Events, bytes, and bytes beyond new content a turn, less what a run of the same node
        with no tool turn costs (its start, its submit turn and its end). New content is what
        the turns added to the node's transcript (the assistant message, the call, the result,
        as stored), or, stricter, only their text: message, tool name and arguments, result."""
        events = (self.events - base.events) / self.turns
        size = (self.size - base.size) / self.turns
        beyond = size - (self.produced - base.produced) / self.turns
        return events, size, beyond, size - (self.text - base.text) / self.turns


async def history_per_turn(client: Client, home: Path, turns: int) -> NodeHistory:
    _, run_id = await _run(client, home, single(), {"busy": tool_turns(turns, MESSAGE)})
    events, size, _ = await _history(client, run_id)
    lines = (home / "runs" / run_id / "transcripts" / "busy.jsonl").read_bytes().splitlines()
    produced = sum(len(line) + 1 for line in lines)
    return NodeHistory(turns, events, size, produced, sum(_text(line) for line in lines))


def _text(line: bytes) -> int:
    item = json.loads(line)
    if item["kind"] == "tool_call":
        return len(item["call"]["name"]) + len(json.dumps(item["call"]["arguments"]))
    if item["kind"] == "tool_result":
        return len(item["result"]["content"])
    return len(item.get("content") or "")


async def tool_turn_overhead(
    client: Client, home: Path, turns: int, tool: str
) -> tuple[float, float, int]:
    """Milliseconds per turn of a node that calls `tool` every turn, the floor per step, and the
    activities a turn takes (a read runs inside the model turn; a write is a batch of its own)."""
    await _run(client, home, single(), {"busy": tool_turns(5, tool=tool)})
    elapsed, run_id = await _run(client, home, single(), {"busy": tool_turns(turns, tool=tool)})
    history = await client.get_workflow_handle(run_id).fetch_history()
    activities = sum(
        1
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        or e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    )
    per_turn = round((activities - 2) / turns)  # less prepare_run (local) and the submit turn
    return elapsed * 1000 / turns, await bare_workflow_ms_per_step(client, turns), per_turn


async def replay(client: Client, home: Path, turns: int) -> tuple[float, float]:
    _, run_id = await _run(client, home, single(), {"busy": tool_turns(turns)})
    _, _, history = await _history(client, run_id)
    replayer = Replayer(
        workflows=[OpenFlowRun],
        data_converter=client.data_converter,
        workflow_runner=workflow_runner(),
    )
    started = time.perf_counter()
    await replayer.replay_workflow(history)
    ours = (time.perf_counter() - started) * 1000
    bare = await replay_ms_per_activity(client, turns) * turns
    return ours, bare


async def kill_recovery(client: Client, home: Path, address: str) -> float:
    queue = f"bench-kill-{uuid.uuid4()}"
    write_scripted_settings(
        home,
        {"busy": [{"message": "x", "delay_ms": 30_000}, {"submit": {"summary": "ok"}}]},
    )
    env = {
        **os.environ,
        "OPENFLOW_HOME": str(home),
        "OPENFLOW_TEMPORAL_ADDRESS": address,
        "OPENFLOW_TASK_QUEUE": queue,
    }

    def spawn() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.workflows.worker_main"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        return proc

    first = spawn()
    # The client stores each run's workflow where the workers read it (the bench's home).
    runs = Runs(client, queue, store=open_backends(home).store)
    run_id = await runs.start(single(), entrypoint="bench")
    while True:
        state = await runs.state(run_id)
        if state.status_by_node.get("busy") == "started":
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.5)
    seen = len(await runs.events(run_id))
    first.send_signal(signal.SIGKILL)
    killed = time.perf_counter()
    first.wait()
    second = spawn()
    try:
        while True:
            events = await runs.events(run_id)
            if any(e.type == "NodeStarted" for e in events[seen:]):
                return time.perf_counter() - killed
            await asyncio.sleep(0.02)
    finally:
        second.kill()
        second.wait()


async def main_async(turns: int, quick: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="openflow-bench-") as tmp:
        home = Path(tmp)
        async with start_server(True) as client:
            address = client.service_client.config.target_host
            rows = await overhead(client, home, turns, rounds=1 if quick else 3)
            print(
                f"orchestration, {turns} zero-latency scripted turns (one model turn each), "
                f"median of {len(rows)} interleaved rounds"
            )
            for label, a, b in (("whole run", 0, 1), ("one more turn", 2, 3)):
                ratios = sorted(row[a] / row[b] for row in rows)
                ours = statistics.median(row[a] for row in rows)
                bare = statistics.median(row[b] for row in rows)
                print(
                    f"  {label:14s}: {ours:6.2f} ms/turn vs floor {bare:5.2f} ms/step, "
                    f"ratio {statistics.median(ratios):.2f}x  (goal <= 1.5x; rounds "
                    + ", ".join(f"{r:.2f}" for r in ratios)
                    + ")"
                )
            base = await history_per_turn(client, home, 0)
            short = await history_per_turn(client, home, 10)
            long = await history_per_turn(client, home, 40 if quick else 200)
            print("history per model turn, 2 KB assistant messages, one `ls` call a turn")
            print(
                f"  a run with no tool turn: {base.events} events, {base.size} bytes "
                "(start, submit turn, end; left out below)"
            )
            rows = [node.per_turn(base) for node in (short, long)]
            for node, (events, size, beyond, strict) in zip((short, long), rows, strict=True):
                print(
                    f"  {node.turns:3d}-turn node    : {events:5.1f} events "
                    f"{size:8.0f} bytes  {beyond:+7.0f} beyond new content, "
                    f"{strict:+5.0f} beyond its text alone  (goal <= 1024)"
                )
            print(f"  bytes ratio long/short: {rows[1][1] / rows[0][1]:.3f}  (goal within 1.10)")
            for tool in ("ls", "write"):
                per_turn, floor_step, acts = await tool_turn_overhead(client, home, turns, tool)
                print(
                    f"{turns} turns on one node calling `{tool}` ({acts} activit{'y' if acts == 1 else 'ies'} a turn)"
                )
                print(f"  OpenFlowRun      : {per_turn:7.2f} ms/turn")
                print(f"  bare floor       : {floor_step:7.2f} ms/step")
                print(
                    f"  ratio            : {per_turn / floor_step:7.2f}x per turn, "
                    f"{per_turn / (acts * floor_step):.2f}x per activity"
                )
            n = 100 if quick else 500
            ours, bare = await replay(client, home, n)
            print(f"replay of a {n}-turn run (a model turn calling `ls` each: {n} activities)")
            print(f"  OpenFlowRun      : {ours:8.1f} ms")
            print(f"  bare {n}-activity : {bare:8.1f} ms")
            print(f"  ratio            : {ours / bare:7.2f}x  (goal <= 2x)")
            recovery = await kill_recovery(client, home, address)
            print(
                f"kill -9 of the worker mid-turn to progress on a new worker: {recovery:.2f} s (goal < 6 s)"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="OpenFlowRun against the bare Temporal floor")
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="smaller runs, for a smoke check")
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.turns, args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["chain", "main", "single", "tool_turns"]
