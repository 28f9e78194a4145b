"""Where a batch of slow-turn runs spends its time: a timeline per run, ours against bare.

    python -m bench.flight [--runs 200] [--delay 5] [--rounds 1] [--metrics]
        [--env KEY=VALUE ...] [--variant NAME:KEY=VALUE,...] [--server-config KEY=JSON ...]

The batch is `bench.scale`'s calls-in-flight measurement (N runs started at once, each one
model turn taking D seconds; bare: one activity sleeping D seconds, its cap lifted). From each
run's history it reads when each step happened: the start, each workflow task's scheduling,
start and completion, each activity's scheduling, start and completion (by activity type), and
the run's close. It prints, per step, the percentiles over the batch of the time since the
run's start and of the gap since the step before, and when the runs started against the
batch's first start (the client's start path). The machine's CPU use during the batch shows
whether the cores were saturated; `--metrics` counts the server's requests and database
operations a run, by operation (deterministic where the times are not, on a shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.scale import (
    BareSleep,
    Bench,
    WorkerProcess,
    embedded_bench,
    single,
    start_bare,
    start_ours,
    wait_all,
)
from openflow.testing import write_scripted_settings

_SHORT = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: "run started",
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED: "wft scheduled",
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED: "wft started",
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "wft completed",
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT: "wft TIMED OUT",
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "scheduled",
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: "started",
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "completed",
    # A heartbeat (or start-to-close) timeout: the turn was lost and goes again.
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "TIMED OUT",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "run completed",
}


@dataclass
class Timeline:
    """One run's steps: (label, seconds since the epoch), in history order."""

    steps: list[tuple[str, float]] = field(default_factory=list)

    @property
    def start(self) -> float:
        return self.steps[0][1]


async def timeline(client: Client, run_id: str) -> Timeline:
    events = (await client.get_workflow_handle(run_id).fetch_history()).events
    kinds: dict[int, str] = {}
    seen: dict[str, int] = {}
    out = Timeline()
    for e in events:
        short = _SHORT.get(e.event_type)
        if short is None:
            continue
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            kinds[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
            short = f"{kinds[e.event_id]} {short}"
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            short = f"{kinds[e.activity_task_started_event_attributes.scheduled_event_id]} {short}"
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sched = e.activity_task_completed_event_attributes.scheduled_event_id
            short = f"{kinds[sched]} {short}"
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            sched = e.activity_task_timed_out_event_attributes.scheduled_event_id
            short = f"{kinds[sched]} {short}"
        seen[short] = seen.get(short, 0) + 1
        label = f"{short} #{seen[short]}" if short.startswith("wft") else short
        out.steps.append((label, e.event_time.ToDatetime().timestamp()))
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def report(side: str, lines: list[Timeline], elapsed: float, busy: float, cpu: dict[str, float]):
    n = len(lines)
    first_start = min(t.start for t in lines)
    starts = [t.start - first_start for t in lines]
    print(
        f"\n== {side}: {n} runs, wall {elapsed:.2f} s; "
        f"machine CPU busy {busy:.0%} of {os.cpu_count()} cores; "
        + "; ".join(f"{k} CPU {v:.2f} s" for k, v in cpu.items())
    )
    print(
        f"  starts after the batch's first (s): p50 {pct(starts, 0.5):.2f} "
        f"p90 {pct(starts, 0.9):.2f} max {max(starts):.2f}"
    )
    # Steps in the order most runs have them; each with its offset from the run's start and
    # its gap from the step before it in the same run.
    offsets: dict[str, list[float]] = {}
    gaps: dict[str, list[float]] = {}
    order: dict[str, list[int]] = {}
    for t in lines:
        prev = t.start
        for i, (label, at) in enumerate(t.steps):
            offsets.setdefault(label, []).append(at - t.start)
            gaps.setdefault(label, []).append(at - prev)
            order.setdefault(label, []).append(i)
            prev = at
    ends = [t.steps[-1][1] - first_start for t in lines]
    print(f"  {'step':44s} {'runs':>5s}  since start p50/p90/max (ms)   gap p50/p90/max (ms)")
    for label in sorted(offsets, key=lambda k: statistics.median(order[k])):
        o, g = offsets[label], gaps[label]
        print(
            f"  {label:44s} {len(o):5d}  {pct(o, 0.5) * 1e3:7.0f} {pct(o, 0.9) * 1e3:7.0f} "
            f"{max(o) * 1e3:7.0f}      {pct(g, 0.5) * 1e3:6.0f} {pct(g, 0.9) * 1e3:6.0f} "
            f"{max(g) * 1e3:6.0f}"
        )
    print(
        f"  last run closed {max(ends):.2f} s after the first start "
        f"(run lengths p50 {pct([t.steps[-1][1] - t.start for t in lines], 0.5):.2f} s)"
    )


METRICS_PORT = 0
COUNTERS = "service_requests|persistence_requests|visibility_persistence_requests"
DUMP: Path | None = None


def metrics() -> dict[str, float]:
    """The server's request counters, by service operation and persistence operation."""
    import re
    import urllib.request

    if not METRICS_PORT:
        return {}
    text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics").read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(rf"^({COUNTERS})\{{(.*)\}} ([0-9.e+]+)$", line)
        if not m:
            continue
        op = re.search(r'operation="([^"]+)"', m.group(2))
        if op is None:
            continue
        key = f"{m.group(1).split('_')[0]}:{op.group(1)}"
        out[key] = out.get(key, 0) + float(m.group(3))
    return out


def cpu_ticks() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


async def batch(bench: Bench, side: str, n: int, delay_s: float) -> float:
    """Run the batch on `side`, print its timeline; its wall time."""
    ours = side != "bare"

    async def work(
        queue: str, proc: WorkerProcess
    ) -> tuple[float, float, float, list[str], dict[str, float]]:
        if ours:
            write_scripted_settings(
                bench.home,
                {"busy": [{"submit": {"summary": "ok"}, "delay_ms": int(delay_s * 1000)}]},
                exhausted="echo",
            )
        metrics0 = metrics()
        busy0, all0 = cpu_ticks()
        client0 = time.process_time()
        began = time.perf_counter()
        if ours:
            ids = await start_ours(bench.client, queue, single(), n)
        else:
            ids = await start_bare(bench.client, queue, BareSleep.run, delay_s, n)
        await wait_all(bench.client, ids)
        elapsed = time.perf_counter() - began
        busy1, all1 = cpu_ticks()
        client_s = time.process_time() - client0
        after = metrics()
        ops = {k: v - metrics0.get(k, 0) for k, v in after.items() if v - metrics0.get(k, 0)}
        return elapsed, (busy1 - busy0) / max(all1 - all0, 1), client_s, ids, ops

    (elapsed, busy, client_s, ids, ops), worker_s, server_s, _ = await bench.measured(
        "ours" if ours else "bare", None if ours else n, work
    )
    gate = asyncio.Semaphore(16)

    async def one(run_id: str) -> Timeline:
        async with gate:
            return await timeline(bench.client, run_id)

    lines = list(await asyncio.gather(*(one(i) for i in ids)))
    if DUMP is not None:
        import json

        DUMP.mkdir(parents=True, exist_ok=True)
        (DUMP / f"{side}.json").write_text(json.dumps([t.steps for t in lines]))
    report(side, lines, elapsed, busy, {"worker": worker_s, "server": server_s, "client": client_s})
    if ops:
        print("  the server's requests (service:) and database operations a run:")
        for k in sorted(ops, key=lambda k: -ops[k])[:24]:
            print(f"    {k:56s} {ops[k] / n:7.2f}")
    return elapsed


async def main_async(args: argparse.Namespace) -> None:
    global METRICS_PORT, DUMP
    DUMP = args.dump
    if args.server_config:
        import json

        from openflow import server

        server.TUNED_DYNAMIC_CONFIG = {  # type: ignore[misc]
            **server.TUNED_DYNAMIC_CONFIG,
            **{k: json.loads(v) for k, v in (e.split("=", 1) for e in args.server_config)},
        }
    if args.metrics:
        from openflow.server import EmbeddedServer, free_port

        METRICS_PORT = free_port()
        command = EmbeddedServer.command

        def with_metrics(self: EmbeddedServer) -> list[str]:
            return [*command(self), "--metrics-port", str(METRICS_PORT)]

        EmbeddedServer.command = with_metrics  # type: ignore[method-assign]
    async with embedded_bench(
        "openflow-flight-",
        before=None,
        extra_env=dict(e.split("=", 1) for e in args.env),
        profile=args.profile,
    ) as bench:
        for round_no in range(args.rounds):
            variants = {"ours": {}} | {
                v.split(":", 1)[0]: dict(e.split("=", 1) for e in v.split(":", 1)[1].split(","))
                for v in args.variant
            }
            sides = ["bare", *variants]
            sides = [s for s in sides if s in args.sides.split(",") or s not in ("bare", "ours")]
            if round_no % 2:
                sides.reverse()
            base = dict(bench.extra_env)
            walls: dict[str, float] = {}
            for side in sides:
                bench.extra_env = base | variants.get(side, {})
                walls[side] = await batch(bench, side, args.runs, args.delay)
            bench.extra_env = base
            if "bare" in walls:
                # The goal's figure: each side's wall time against bare's, this round.
                print(
                    f"\n== round {round_no + 1}: wall against bare's: "
                    + ", ".join(
                        f"{s} {w / walls['bare']:.2f}x" for s, w in walls.items() if s != "bare"
                    )
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a timeline of the calls-in-flight batch")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--delay", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="also measure our worker with these variables, under NAME (repeatable)",
    )
    parser.add_argument("--sides", default="bare,ours", help="bare,ours or one of them")
    parser.add_argument(
        "--server-config",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="a dynamic config value of the embedded server over the tuned ones (repeatable)",
    )
    parser.add_argument("--dump", type=Path, help="write each side's timelines here as JSON")
    parser.add_argument("--metrics", action="store_true", help="count the server's requests")
    parser.add_argument("--profile", type=Path, help="sample each worker with py-spy, here")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    asyncio.run(main_async(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
