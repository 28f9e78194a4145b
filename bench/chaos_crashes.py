"""Crash scenarios of the chaos campaign: worker kill -9, server kill -9, stop and resume."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench.chaos import (
    Campaign,
    Plan,
    Tally,
    duplicates,
    first,
    ledger_lines,
    make_workflow,
    yolo_node,
)
from openflow.client import RunConflict
from openflow.engine import RunEvent
from openflow.engine.events import ToolOutcomeUnknown

DAG = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]
"""A diamond: b and c run in parallel once a is done."""


def side_effect_turns(node_id: str, delay_ms: int = 300) -> list[dict[str, Any]]:
    """One batch that appends to the ledger (bash) and writes a file, then a submit."""
    bash = f"echo start-{node_id} >> ledger.txt; sleep 0.4; echo end-{node_id} >> ledger.txt"
    return [
        {
            "tools": [
                {"name": "bash", "args": {"command": bash}, "id": f"{node_id}-bash"},
                {
                    "name": "write",
                    "args": {"path": f"{node_id}.txt", "content": f"written by {node_id}\n"},
                    "id": f"{node_id}-write",
                },
            ],
            "delay_ms": delay_ms,
        },
        {"submit": {"summary": f"{node_id} done"}, "delay_ms": delay_ms},
    ]


def dag_profile(campaign: Campaign, prefix: str) -> tuple[str, list[str], list[tuple[str, str]]]:
    nodes = [f"{prefix}{n}" for n in "abcd"]
    edges = [(f"{prefix}{a}", f"{prefix}{b}") for a, b in DAG]
    profile = campaign.profile(f"{prefix}dag", {n: side_effect_turns(n) for n in nodes})
    return profile, nodes, edges


def check_side_effects(
    folder: Path, events: list[RunEvent], nodes: list[str], known_outcomes: bool
) -> list[str]:
    """What went wrong with a run's side effects: duplicates, lost writes, unknown outcomes.

    A call settled "outcome unknown" may have run once or not at all; with `known_outcomes`
    (the worker stayed up) a call whose effect is on disk must not be settled unknown.
    """
    problems = []
    lines = ledger_lines(folder)
    dup = duplicates(lines)
    if dup:
        problems.append(f"ran twice: {first(dup)}")
    unknown = {e.tool_call_id for e in events if isinstance(e, ToolOutcomeUnknown)}
    for node_id in nodes:
        ran = f"start-{node_id}" in lines
        if f"{node_id}-bash" in unknown:
            if known_outcomes and ran:
                problems.append(f"{node_id}-bash ran but was settled 'outcome unknown'")
        elif lines.count(f"start-{node_id}") != 1 or lines.count(f"end-{node_id}") != 1:
            problems.append(f"{node_id}-bash reported done but the ledger says {lines}")
        written = folder / f"{node_id}.txt"
        landed = written.exists() and written.read_text() == f"written by {node_id}\n"
        if f"{node_id}-write" in unknown:
            if known_outcomes and landed:
                problems.append(f"{node_id}-write landed but was settled 'outcome unknown'")
        elif not landed:
            problems.append(f"{node_id}-write reported done but {written.name} is not as written")
    return problems


async def judge_run(
    campaign: Campaign,
    tally: Tally,
    run_id: str,
    folder: Path,
    nodes: list[str],
    known_outcomes: bool = False,
) -> None:
    status = await campaign.settle(run_id)
    problems = [] if status == "completed" else [f"ended {status}"]
    if not status.startswith("stuck"):
        events = await campaign.events(run_id)
        problems += check_side_effects(folder, events, nodes, known_outcomes)
    tally.record(not problems, f"{run_id}: {'; '.join(problems)}")


def chain_turns(chain: list[str], steps: int) -> dict[str, list[dict[str, Any]]]:
    """Per node, `steps` batches of a ledger append and a write, then a submit."""
    turns: dict[str, list[dict[str, Any]]] = {}
    for node_id in chain:
        batches = []
        for k in range(steps):
            command = f"echo {node_id}-{k} >> ledger.txt; sleep 0.2"
            batches.append(
                {
                    "tools": [
                        {"name": "bash", "args": {"command": command}, "id": f"{node_id}-{k}"},
                        {
                            "name": "write",
                            "args": {"path": f"{node_id}-{k}.txt", "content": f"{node_id}-{k}\n"},
                            "id": f"{node_id}-{k}-write",
                        },
                    ],
                    "delay_ms": 250,
                }
            )
        turns[node_id] = [*batches, {"submit": {"summary": f"{node_id} done"}, "delay_ms": 250}]
    return turns


async def worker_kills(campaign: Campaign, plan: Plan) -> list[Tally]:
    """Kill the only worker at a random moment while several runs go, then start a new one.

    One longer run is killed again and again, each time after it made some progress (with few
    kills, it runs beside the rounds and takes theirs).
    """
    many = Tally("worker kill -9, random points")
    profile, nodes, edges = dag_profile(campaign, "k")
    wf = make_workflow("kill-dag", [yolo_node(n) for n in nodes], edges)
    chain = [f"m{i}" for i in range(1, 5 if plan.kills_of_one_run > 2 else 3)]
    steps = max(3, plan.kills_of_one_run)
    chain_profile = campaign.profile("many-kills", chain_turns(chain, steps))
    chain_wf = make_workflow(
        "kill-chain", [yolo_node(n) for n in chain], list(zip(chain, chain[1:], strict=False))
    )
    rng = campaign.random
    chain_folder = campaign.folder("many-kills")
    chain_run = ""
    kills = 0
    if plan.kills_of_one_run <= plan.kill_rounds:
        # Few kills: the rounds' own kills are the long run's kills too.
        await campaign.ensure_worker()
        chain_run = await campaign.start(chain_wf, chain_profile, chain_folder)
    for _ in range(plan.kill_rounds):
        await campaign.ensure_worker()
        started = []
        for _ in range(plan.runs_per_round):
            folder = campaign.folder("kill")
            started.append((await campaign.start(wf, profile, folder), folder))
            await asyncio.sleep(rng.uniform(0.0, 0.8))
        await asyncio.sleep(rng.uniform(0.2, 4.5))
        if chain_run and await campaign.status(chain_run) == "running":
            kills += 1
        campaign.kill_workers()
        await campaign.spawn_worker_async()
        await asyncio.gather(*(judge_run(campaign, many, r, f, nodes) for r, f in started))

    if not chain_run:
        await campaign.ensure_worker()
        chain_run = await campaign.start(chain_wf, chain_profile, chain_folder)
    while kills < plan.kills_of_one_run:
        # Each kill lands after the run has made progress on the new worker, at another point.
        done = len(ledger_lines(chain_folder))
        end = time.monotonic() + 30
        while len(ledger_lines(chain_folder)) == done and time.monotonic() < end:
            await asyncio.sleep(0.1)
        await asyncio.sleep(rng.uniform(0.0, 1.5))
        if await campaign.status(chain_run) in ("completed", "failed", "stopped"):
            break
        campaign.kill_workers()
        kills += 1
        await campaign.spawn_worker_async()

    status = await campaign.settle(chain_run)
    problems = [] if status == "completed" else [f"ended {status}"]
    lines = ledger_lines(chain_folder)
    if duplicates(lines):
        problems.append(f"ran twice: {first(duplicates(lines))}")
    events = await campaign.events(chain_run)
    unknown = {e.tool_call_id for e in events if isinstance(e, ToolOutcomeUnknown)}
    missing = [
        f"{n}-{k}"
        for n in chain
        for k in range(steps)
        if f"{n}-{k}" not in unknown and f"{n}-{k}" not in lines
    ]
    if status == "completed" and missing:
        problems.append(f"reported done but not in the ledger: {first(missing)}")
    one = Tally(f"worker kill -9, one run killed {kills}x")
    one.record(not problems, f"{chain_run} after {kills} kills: {'; '.join(problems)}")
    return [many, one]


MCP_SERVER = """from mcp.server.mcpserver import MCPServer

server = MCPServer("chaos")


@server.tool(name="echo", description="Says it back.")
def echo(text: str) -> str:
    return text


if __name__ == "__main__":
    server.run()
"""


RECOVERY_DEADLINE = 20.0
"""Seconds a one-node run killed while it prepares may take to complete on the next worker."""


def _orphans(script: Path, parents: set[int]) -> list[int]:
    """Processes running `script` whose parent is none of `parents` (their worker is gone)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if str(script).encode() in cmdline and ppid not in parents:
            found.append(int(proc.name))
    return found


async def prepare_kills(campaign: Campaign, plan: Plan) -> list[Tally]:
    """Kill the worker while a run prepares with an MCP server configured.

    The run must move on to the next worker and complete within 20 s, and the MCP server the dead worker
    started must be gone with it.
    """
    tally = Tally("worker kill -9 in prepare_run (MCP)")
    script = campaign.root / "chaos_mcp_server.py"
    script.write_text(MCP_SERVER)
    campaign.mcp_servers = {
        "chaos": {"transport": "stdio", "command": sys.executable, "args": [str(script)]}
    }
    campaign.write_settings()
    profile = campaign.profile("prepare", {"p": side_effect_turns("p")})
    wf = make_workflow("prepare-kill", [yolo_node("p")])
    rng = campaign.random
    try:
        for _ in range(plan.prepare_kills):
            await campaign.ensure_worker()
            folder = campaign.folder("prepare")
            run_id = await campaign.start(wf, profile, folder)
            await asyncio.sleep(rng.uniform(0.05, 1.0))
            campaign.kill_workers()
            await campaign.spawn_worker_async()
            status = await campaign.settle(run_id, deadline=RECOVERY_DEADLINE)
            problems = [] if status == "completed" else [f"ended {status} 20 s after the kill"]
            if not status.startswith("stuck"):
                events = await campaign.events(run_id)
                problems += check_side_effects(folder, events, ["p"], known_outcomes=False)
            parents = {w.process.pid for w in campaign.workers if w.alive}
            orphans = _orphans(script, parents)
            if orphans:
                problems.append(f"{len(orphans)} MCP server(s) of the dead worker still running")
                for pid in orphans:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            tally.record(not problems, f"{run_id}: {'; '.join(problems)}")
    finally:
        campaign.mcp_servers = {}
        campaign.write_settings()
    return [tally]


async def server_kills(campaign: Campaign, plan: Plan) -> list[Tally]:
    """kill -9 the Temporal server mid-run and start it again on its SQLite file."""
    tally = Tally("server kill -9 mid-run")
    profile, nodes, edges = dag_profile(campaign, "s")
    wf = make_workflow("server-dag", [yolo_node(n) for n in nodes], edges)
    rng = campaign.random
    for _ in range(plan.server_rounds):
        await campaign.ensure_worker()
        started = []
        for _ in range(plan.runs_per_round):
            folder = campaign.folder("server")
            started.append((await campaign.start(wf, profile, folder), folder))
        # Kill it while a batch runs: a bash call has started and not ended yet.
        end = time.monotonic() + 60
        while time.monotonic() < end and not any(
            any(line.startswith("start-") for line in ledger_lines(f)) for _, f in started
        ):
            await asyncio.sleep(0.02)
        await asyncio.sleep(rng.uniform(0.0, 0.2))
        campaign.server.kill()
        await asyncio.sleep(rng.uniform(0.2, 2.0))
        await campaign.server.start()
        await campaign.reconnect()
        alive = [w for w in campaign.workers if w.alive]
        if not alive:
            tally.notes.append("the worker exited while the server was down")
            await campaign.spawn_worker_async()
        await asyncio.gather(
            *(
                judge_run(campaign, tally, r, f, nodes, known_outcomes=bool(alive))
                for r, f in started
            )
        )
    return [tally]


async def stop_and_resume(campaign: Campaign, plan: Plan) -> list[Tally]:
    """Stop random runs while the others go on, resume each, and check each ends completed."""
    runs_tally = Tally("stop and resume: runs")
    ops = Tally("stop and resume: stops")
    chain = ["r1", "r2"]
    steps = max(4, 2 + 3 * plan.stops // plan.stop_runs)
    turns: dict[str, list[dict[str, Any]]] = {}
    for node_id in chain:
        batches = []
        for k in range(steps):
            command = f"echo {node_id}-{k} >> ledger.txt; sleep 0.3"
            batches.append(
                {
                    "tools": [
                        {"name": "bash", "args": {"command": command}, "id": f"{node_id}-{k}"}
                    ],
                    "delay_ms": 200,
                }
            )
        turns[node_id] = [*batches, {"submit": {"summary": f"{node_id} done"}, "delay_ms": 200}]
    profile = campaign.profile("stop-resume", turns)
    wf = make_workflow("stop-chain", [yolo_node(n) for n in chain], [("r1", "r2")])
    await campaign.ensure_worker()
    rng = campaign.random
    started: list[tuple[str, Path]] = []
    for _ in range(plan.stop_runs):
        folder = campaign.folder("stop")
        started.append((await campaign.start(wf, profile, folder), folder))
    deadline = time.monotonic() + 30 + 10 * plan.stops
    done = 0
    while done < plan.stops and time.monotonic() < deadline:
        await asyncio.sleep(rng.uniform(0.1, 1.0))
        running = [r for r, _ in started if await campaign.status(r) == "running"]
        if not running:
            if all([await campaign.status(r) == "completed" for r, _ in started]):
                break
            continue
        run_id = rng.choice(running)
        with contextlib.suppress(RunConflict):
            await campaign.runs.stop(run_id)
            done += 1
            status = await campaign.settle(run_id, until=("stopped", "completed", "failed"))
            if status == "completed":
                ops.record(True)
                continue
            if status != "stopped":
                ops.record(False, f"{run_id}: stop ended {status}")
                continue
            try:
                await campaign.runs.resume(run_id)
            except Exception as exc:  # noqa: BLE001 - any refusal of a stopped run is a failure
                ops.record(False, f"{run_id}: resume refused: {exc}")
                continue
            ops.record(True)
    for run_id, folder in started:
        status = await campaign.settle(run_id)
        problems = [] if status == "completed" else [f"ended {status}"]
        lines = ledger_lines(folder)
        if duplicates(lines):
            problems.append(f"ran twice: {first(duplicates(lines))}")
        runs_tally.record(not problems, f"{run_id}: {'; '.join(problems)}")
    return [runs_tally, ops]
