"""OpenFlowRun under load on one worker, side by side with bare Temporal on the same server.

    python -m bench.scale [--quick] [--rounds N] [--before DIR]

Every figure is measured in one run on one embedded tuned server, in interleaved rounds (bare,
ours, and with `--before DIR` the code checked out in DIR, e.g. the main branch, so a change
shows its before and after). Each side runs in a worker process of its own, started fresh for
each measurement, so its CPU (utime + stime from /proc/<pid>/stat) and memory (VmRSS) are its
alone; the server's CPU is read the same way. Bare Temporal's workers run with the SDK's
defaults and no sandbox (as OpenFlowRun's do):

- throughput: N runs started at once of a root and two parallel children (5 activities a
  run) against N bare workflows running the same activities as no-ops in the same shape;
  runs/s, activities/s, worker and server CPU per run, workflow task timeouts, history bytes;
- latency: runs one at a time; start to the first model turn (bare: to its second activity)
  and start to completion;
- unbalanced DAG: runs one at a time of a root, then a chain of three nodes beside a single
  one, each model turn taking `--hop-delay` seconds (bare: the same shape of sleeping
  activities); the critical path from the root's call to the review's, and what each hop
  costs beyond its turn;
- calls in flight: N runs with one model turn that takes D seconds (the scripted provider's
  `delay_ms`) against N bare workflows with one activity sleeping D seconds, cap lifted;
- paused runs: the worker's RSS growth holding N runs waiting for a person (bare: waiting on a
  signal), both read with the worker at rest (`rss_at_rest`), and the rate at which answering them all by signal completes them. A run whose
  turns a saturated worker lost (its heartbeats late) fails its node after the engine's
  retries and pauses for a retry instead; once answered, it asks again from its first
  scripted turn. The bench answers such runs again until they complete, and counts the
  answers it sent again ("answers again (turns lost)").

The machine may be shared: compare the ratios, which interleaving keeps fair, not the
absolute figures.
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
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributeKey
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

with workflow.unsafe.imports_passed_through():
    from temporalio.contrib.pydantic import pydantic_data_converter

    from bench.floor import noop
    from openflow import contracts as c
    from openflow.client import Runs
    from openflow.engine.spec import Workflow
    from openflow.server import EmbeddedServer, free_port
    from openflow.testing import write_scripted_settings

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAUSED = SearchAttributeKey.for_keyword(c.SA_STATUS)


# --- the bare side -----------------------------------------------------------------------


@activity.defn(name="scale_sleep")
async def sleep_activity(seconds: float) -> None:
    """Wait like a model call waits on the network."""
    await asyncio.sleep(seconds)


@workflow.defn(name="ScaleBareDag")
class BareDag:
    """No-op activities in layers: one after another, a layer's activities in parallel."""

    @workflow.run
    async def run(self, layers: list[int]) -> int:
        for width in layers:
            await asyncio.gather(
                *(
                    workflow.execute_activity(noop, start_to_close_timeout=timedelta(seconds=60))
                    for _ in range(width)
                )
            )
        return sum(layers)


@workflow.defn(name="ScaleBareSleep")
class BareSleep:
    """One activity that sleeps."""

    @workflow.run
    async def run(self, seconds: float) -> None:
        await workflow.execute_activity(
            sleep_activity, seconds, start_to_close_timeout=timedelta(seconds=600)
        )


@workflow.defn(name="ScaleBareUnbalanced")
class BareUnbalanced:
    """The unbalanced DAG's shape: a start, a root's call, then a chain of calls beside a
    single one, then a last activity (the review). Each call sleeps like a model call."""

    @workflow.run
    async def run(self, shape: list[float]) -> int:
        chain, seconds = int(shape[0]), shape[1]

        async def call() -> None:
            await workflow.execute_activity(
                sleep_activity, seconds, start_to_close_timeout=timedelta(seconds=600)
            )

        async def long_branch() -> None:
            for _ in range(chain):
                await call()

        await workflow.execute_activity(noop, start_to_close_timeout=timedelta(seconds=60))
        await call()
        await asyncio.gather(long_branch(), call())
        await workflow.execute_activity(noop, start_to_close_timeout=timedelta(seconds=60))
        return chain + 2


@workflow.defn(name="ScaleBarePaused")
class BarePaused:
    """Two no-op activities (a run's start and first turn), then a wait for an answer."""

    def __init__(self) -> None:
        self._answer: str | None = None

    @workflow.run
    async def run(self) -> str:
        for _ in range(2):
            await workflow.execute_activity(noop, start_to_close_timeout=timedelta(seconds=60))
        workflow.upsert_search_attributes([PAUSED.value_set("paused")])
        await workflow.wait_condition(lambda: self._answer is not None)
        await workflow.execute_activity(noop, start_to_close_timeout=timedelta(seconds=60))
        return self._answer or ""

    @workflow.signal(name="answer")
    def answer(self, text: str) -> None:
        self._answer = text


async def serve_bare(address: str, queue: str, cap: int | None) -> None:
    """The bare worker process: `python -m bench.scale --serve-bare ADDRESS QUEUE CAP`."""
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[BareDag, BareSleep, BarePaused, BareUnbalanced],
        activities=[noop, sleep_activity],
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_concurrent_activities=cap,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print("bare worker ready", flush=True)
        await stop.wait()


# --- worker processes --------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss(pid: int) -> int:
    """A process's resident memory in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class WorkerProcess:
    """One side's worker in a process of its own, started and stopped around a measurement."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, ready: str) -> None:
        self.argv, self.env, self.cwd, self.ready = argv, env, cwd, ready
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = Path(tempfile.mkstemp(prefix="openflow-scale-worker-", suffix=".log")[1])

    async def __aenter__(self) -> WorkerProcess:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.argv, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 120
        while self.ready not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"worker {self.argv} did not start:\n{self.log.read_text(errors='replace')}"
                )
            await asyncio.sleep(0.05)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.proc.wait, 20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.unlink(missing_ok=True)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


@dataclass
class Bench:
    client: Client
    server_pid: int
    address: str
    home: Path
    before: Path | None
    #: Variables for OpenFlow's workers (`--env`), e.g. OPENFLOW_STICKY_TIMEOUT=1.
    extra_env: dict[str, str] = field(default_factory=dict)
    #: Where py-spy writes each measured worker's samples (`--profile DIR`), or nowhere.
    profile: Path | None = None

    def worker(self, side: str, queue: str, cap: int | None = None) -> WorkerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENFLOW_", "TEMPORAL_"))}
        env.update(
            OPENFLOW_HOME=str(self.home),
            OPENFLOW_TEMPORAL_ADDRESS=self.address,
            OPENFLOW_TASK_QUEUE=queue,
            PYTHONUNBUFFERED="1",
        )
        if side == "bare":
            env["PYTHONPATH"] = str(ROOT)
            argv = [sys.executable, "-m", "bench.scale", "--serve-bare", self.address, queue]
            return WorkerProcess([*argv, str(cap or 0)], env, ROOT, "bare worker ready")
        code = ROOT if side == "ours" else self.before
        assert code is not None
        env["PYTHONPATH"] = str(code)
        env.update(self.extra_env)
        argv = [sys.executable, "-m", "openflow.cli", "worker"]
        return WorkerProcess(argv, env, code, "Worker on")

    async def measured(
        self, side: str, cap: int | None, work: Callable[[str, WorkerProcess], Awaitable[Any]]
    ) -> tuple[Any, float, float, WorkerProcess]:
        """Run `work(queue)` against a fresh worker of `side`; the result and the worker's and
        the server's CPU seconds it took."""
        queue = f"scale-{side}-{uuid.uuid4().hex[:8]}"
        async with self.worker(side, queue, cap) as proc:
            await self.warm_up(side, queue)
            worker0, server0 = proc_cpu_s(proc.pid), proc_cpu_s(self.server_pid)
            with self.profiling(side, proc.pid):
                result = await work(queue, proc)
            worker_s = proc_cpu_s(proc.pid) - worker0
            server_s = proc_cpu_s(self.server_pid) - server0
        return result, worker_s, server_s, proc

    @contextmanager
    def profiling(self, side: str, pid: int) -> Iterator[None]:
        """With `--profile DIR`, py-spy samples the worker while it works (it costs the worker
        some CPU, so a profiled run's figures are not the ones to compare)."""
        if self.profile is None:
            yield
            return
        self.profile.mkdir(parents=True, exist_ok=True)
        out = self.profile / f"{side}-{pid}.txt"
        argv = ["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "--gil"]
        spy = subprocess.Popen(
            [*argv, "--nonblocking", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            yield
        finally:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
            if out.exists():
                print(profile_summary(out), flush=True)

    async def warm_up(self, side: str, queue: str) -> None:
        if side == "bare":
            await asyncio.gather(
                *(self.bare_start(BareDag.run, DAG_LAYERS, queue) for _ in range(3))
            )
            return
        write_scripted_settings(self.home, {}, exhausted="echo")
        runs = Runs(self.client, queue)
        ids = [await runs.start(dag(), entrypoint="warm up") for _ in range(3)]
        await wait_all(self.client, ids, timeout=120)

    async def bare_start(self, fn: Any, arg: Any, queue: str) -> Any:
        handle = await self.client.start_workflow(
            fn, arg, id=f"bare-{uuid.uuid4()}", task_queue=queue
        )
        return await handle.result()


def profile_summary(path: Path, top: int = 40) -> str:
    """The functions py-spy saw most, by samples spent in them (self) and under them (total)."""
    own: dict[str, int] = {}
    under: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            under[frame] = under.get(frame, 0) + n
    lines = [f"{path.name}: {total} samples", "  self%  total%  function"]
    for frame, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * n / total:5.1f}  {100 * under[frame] / total:5.1f}  {frame}")
    lines.append("  by total:")
    for frame, n in sorted(under.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * own.get(frame, 0) / total:5.1f}  {100 * n / total:5.1f}  {frame}")
    path.with_suffix(".top").write_text("\n".join(lines) + "\n")
    return "\n".join(lines[:12])


# --- OpenFlow's side ---------------------------------------------------------------------


def _node(node_id: str, **agent: Any) -> dict[str, Any]:
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
            "handoff": {"format": "json"},
            "tools": {"approvalMode": "yolo"},
            **agent,
        },
    }


def dag() -> Workflow:
    """A root and two parallel children: prepare, 3 model turns (each storing its node's
    handoff), the review."""
    return Workflow.model_validate(
        {
            "id": "scale-dag",
            "name": "scale dag",
            "nodes": [_node("root"), _node("left"), _node("right")],
            "edges": [
                {"id": "e1", "from": "root", "to": "left"},
                {"id": "e2", "from": "root", "to": "right"},
            ],
        }
    )


def single(node_id: str = "busy", **agent: Any) -> Workflow:
    return Workflow.model_validate(
        {"id": "scale-one", "name": "scale one", "nodes": [_node(node_id, **agent)], "edges": []}
    )


#: The unbalanced DAG's long branch below its root (the short one is a single node).
CHAIN = 3


def unbalanced() -> Workflow:
    """A root, then a chain of CHAIN nodes beside a single one: the chain is the critical
    path, and each of its hops is a node's handoff and the next node's dispatch."""
    chain = [f"step{i}" for i in range(1, CHAIN + 1)]
    ids = ["root", *chain, "side"]
    pairs = [("root", chain[0]), *zip(chain, chain[1:], strict=False), ("root", "side")]
    return Workflow.model_validate(
        {
            "id": "scale-unbalanced",
            "name": "scale unbalanced",
            "nodes": [_node(i) for i in ids],
            "edges": [{"id": f"{a}-{b}", "from": a, "to": b} for a, b in pairs],
        }
    )


#: The bare workflow's shape for the same 5 activities: prepare, root's turn, the children's
#: turns in parallel, the review. (Before turns stored handoffs, a run had 8: a handoff write
#: after each turn; compare such a `--before` side by runs/s, not activities/s.)
DAG_LAYERS = [1, 1, 2, 1]
DAG_ACTIVITIES = sum(DAG_LAYERS)


async def start_all(starts: Iterable[Awaitable[str]], width: int = 64) -> list[str]:
    gate = asyncio.Semaphore(width)

    async def one(start: Awaitable[str]) -> str:
        async with gate:
            return await start

    return list(await asyncio.gather(*(one(s) for s in starts)))


async def wait_all(client: Client, ids: list[str], timeout: float = 600) -> list[Any]:
    """Every run's result; a run that did not complete stops the benchmark, saying why."""
    results = await asyncio.wait_for(
        asyncio.gather(*(client.get_workflow_handle(i).result() for i in ids)), timeout
    )
    for run_id, result in zip(ids, results, strict=True):
        if isinstance(result, dict) and result.get("status") != "completed":
            raise RuntimeError(f"run {run_id} ended {result.get('status')}: {result.get('error')}")
    return list(results)


async def start_ours(client: Client, queue: str, wf: Workflow, n: int) -> list[str]:
    runs = Runs(client, queue)
    return await start_all(runs.start(wf, entrypoint="bench") for _ in range(n))


async def start_bare(client: Client, queue: str, fn: Any, arg: Any, n: int) -> list[str]:
    async def one() -> str:
        args = () if arg is None else (arg,)
        handle: WorkflowHandle[Any, Any] = await client.start_workflow(
            fn, *args, id=f"bare-{uuid.uuid4()}", task_queue=queue
        )
        return handle.id

    return await start_all(one() for _ in range(n))


# --- histories ---------------------------------------------------------------------------


@dataclass
class HistoryFacts:
    #: When each call that took a while (a model turn; bare: the sleeping activity) started
    #: and ended, seconds since the epoch.
    calls: list[tuple[float, float]]
    size: int
    activities: int
    wft_timeouts: int
    #: Workflow tasks completed (each one an activation of the workflow on the worker).
    workflow_tasks: int
    start_to_first_ms: float  # ours: to the first model turn; bare: to the second activity
    start_to_end_ms: float


async def history_facts(client: Client, run_id: str, ours: bool) -> HistoryFacts:
    history = await client.get_workflow_handle(run_id).fetch_history()
    events = history.events
    size = sum(len(e.SerializeToString()) for e in events)
    started = events[0].event_time.ToDatetime()
    ended = events[-1].event_time.ToDatetime()
    scheduled = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    if ours:
        first = next(
            (
                e
                for e in scheduled
                if e.activity_task_scheduled_event_attributes.activity_type.name
                == c.ACTIVITY_MODEL_TURN
            ),
            None,
        )
    else:
        first = scheduled[1] if len(scheduled) > 1 else None
    to_first = (first.event_time.ToDatetime() - started).total_seconds() * 1000 if first else 0
    timeouts = sum(
        1 for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
    )
    slow = {c.ACTIVITY_MODEL_TURN, "scale_sleep"}
    kinds = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name for e in scheduled
    }
    began: dict[int, float] = {}
    calls = []
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            sched = e.activity_task_started_event_attributes.scheduled_event_id
            began[sched] = e.event_time.ToDatetime().timestamp()
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sched = e.activity_task_completed_event_attributes.scheduled_event_id
            if kinds.get(sched) in slow and sched in began:
                calls.append((began[sched], e.event_time.ToDatetime().timestamp()))
    # A local activity (a run's start) is an activity's work too: its marker counts as one.
    local = sum(
        1
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    )
    return HistoryFacts(
        calls=calls,
        size=size,
        activities=len(scheduled) + local,
        wft_timeouts=timeouts,
        workflow_tasks=sum(
            1 for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        ),
        start_to_first_ms=to_first,
        start_to_end_ms=(ended - started).total_seconds() * 1000,
    )


def peak(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one moment."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


async def all_facts(client: Client, ids: list[str], ours: bool) -> list[HistoryFacts]:
    gate = asyncio.Semaphore(16)

    async def one(run_id: str) -> HistoryFacts:
        async with gate:
            return await history_facts(client, run_id, ours)

    return list(await asyncio.gather(*(one(i) for i in ids)))


# --- the measurements --------------------------------------------------------------------


@dataclass
class Figures:
    """One side's figures from one round."""

    values: dict[str, float] = field(default_factory=dict)


async def throughput(bench: Bench, side: str, n: int, out: Figures) -> None:
    ours = side != "bare"

    async def work(queue: str, proc: WorkerProcess) -> tuple[float, list[str]]:
        if ours:
            write_scripted_settings(bench.home, {}, exhausted="echo")
        began = time.perf_counter()
        if ours:
            ids = await start_ours(bench.client, queue, dag(), n)
        else:
            ids = await start_bare(bench.client, queue, BareDag.run, DAG_LAYERS, n)
        await wait_all(bench.client, ids)
        return time.perf_counter() - began, ids

    (elapsed, ids), worker_s, server_s, _ = await bench.measured(side, None, work)
    facts = await all_facts(bench.client, ids, ours)
    acts = sum(f.activities for f in facts)
    out.values.update(
        {
            "runs/s": n / elapsed,
            "activities/s": acts / elapsed,
            "activities a run": acts / n,
            "workflow tasks a run": sum(f.workflow_tasks for f in facts) / n,
            "worker CPU ms/run": worker_s * 1000 / n,
            "server CPU ms/run": server_s * 1000 / n,
            "history bytes/run": sum(f.size for f in facts) / n,
            "workflow task timeouts (batch)": sum(f.wft_timeouts for f in facts),
            "runs with a task timeout (batch)": sum(1 for f in facts if f.wft_timeouts),
            "start to end ms (batch median)": statistics.median(f.start_to_end_ms for f in facts),
        }
    )


async def latency(bench: Bench, side: str, k: int, out: Figures) -> None:
    ours = side != "bare"

    async def work(queue: str, proc: WorkerProcess) -> list[str]:
        ids = []
        for _ in range(k):
            if ours:
                ids += await start_ours(bench.client, queue, dag(), 1)
            else:
                ids += await start_bare(bench.client, queue, BareDag.run, DAG_LAYERS, 1)
            await wait_all(bench.client, ids[-1:])
        return ids

    if ours:
        write_scripted_settings(bench.home, {}, exhausted="echo")
    ids, _, _, _ = await bench.measured(side, None, work)
    facts = await all_facts(bench.client, ids, ours)
    out.values["start to first model turn ms"] = statistics.median(
        f.start_to_first_ms for f in facts
    )
    out.values["start to end ms (one at a time)"] = statistics.median(
        f.start_to_end_ms for f in facts
    )


async def critical_path(client: Client, run_id: str, ours: bool) -> float:
    """Milliseconds from the root's call being scheduled to the run's last activity (the
    review; bare: its last no-op) being scheduled: every turn and hop of the long branch."""
    events = (await client.get_workflow_handle(run_id).fetch_history()).events
    scheduled = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    if ours:
        first = next(
            e
            for e in scheduled
            if e.activity_task_scheduled_event_attributes.activity_type.name
            == c.ACTIVITY_MODEL_TURN
        )
    else:
        first = scheduled[1]
    span = scheduled[-1].event_time.ToDatetime() - first.event_time.ToDatetime()
    return span.total_seconds() * 1000


async def unbalanced_dag(bench: Bench, side: str, k: int, delay_s: float, out: Figures) -> None:
    ours = side != "bare"
    turns = CHAIN + 1

    async def work(queue: str, proc: WorkerProcess) -> list[str]:
        if ours:
            script = {
                node.id: [{"submit": {"summary": node.id}, "delay_ms": int(delay_s * 1000)}]
                for node in unbalanced().nodes
            }
            write_scripted_settings(bench.home, script, exhausted="echo")
        ids: list[str] = []
        for _ in range(k):
            if ours:
                ids += await start_ours(bench.client, queue, unbalanced(), 1)
            else:
                ids += await start_bare(
                    bench.client, queue, BareUnbalanced.run, [CHAIN, delay_s], 1
                )
            await wait_all(bench.client, ids[-1:])
        return ids

    ids, _, _, _ = await bench.measured(side, None, work)
    spans = [await critical_path(bench.client, i, ours) for i in ids]
    path = statistics.median(spans)
    out.values["unbalanced DAG critical path ms"] = path
    out.values["unbalanced DAG ms a hop beyond the turn"] = (path - turns * delay_s * 1000) / turns


async def in_flight(bench: Bench, side: str, n: int, delay_s: float, out: Figures) -> None:
    ours = side != "bare"

    async def work(queue: str, proc: WorkerProcess) -> tuple[float, list[str]]:
        if ours:
            write_scripted_settings(
                bench.home,
                {"busy": [{"submit": {"summary": "ok"}, "delay_ms": int(delay_s * 1000)}]},
                exhausted="echo",
            )
        began = time.perf_counter()
        if ours:
            ids = await start_ours(bench.client, queue, single(), n)
        else:
            ids = await start_bare(bench.client, queue, BareSleep.run, delay_s, n)
        await wait_all(bench.client, ids)
        return time.perf_counter() - began, ids

    (elapsed, ids), _, _, _ = await bench.measured(side, None if ours else n, work)
    facts = await all_facts(bench.client, ids, ours)
    out.values[f"{n} runs x one {delay_s:g} s turn: wall s"] = elapsed
    slow = [call for f in facts for call in f.calls if call[1] - call[0] >= delay_s * 0.9]
    out.values["peak slow calls in flight"] = peak(slow)
    out.values["workflow task timeouts (in flight)"] = sum(f.wft_timeouts for f in facts)


async def drive_paused(
    client: Client, queue: str, ids: list[str], node_id: str = "busy", timeout: float = 600
) -> int:
    """Until every run of `ids` completes, answer again the ones that wait on a person again;
    how many answers that took.

    A node whose model turns a saturated worker lost (their heartbeats late) fails after the
    engine's retries (`retry_lost`) and the run pauses for a retry, which its visibility
    status tells apart from a question no better than the bench's answer does: the answer
    retries the node, whose script starts over from its question, so the run pauses again.
    Whether a run waits is read from the server (no workflow task or activity pending), not
    by a query the busy worker would have to answer; an answer again retries a failed node
    or answers its question. Raises, saying what the runs wait on, when they do not complete
    within `timeout` seconds.
    """
    running = f'TaskQueue="{queue}" AND ExecutionStatus="Running"'
    deadline = time.monotonic() + timeout
    again, last, since = 0, -1, time.monotonic()
    while (left := (await client.count_workflows(running)).count) > 0:
        if time.monotonic() > deadline:
            waiting = [wf.id async for wf in client.list_workflows(running, limit=3)]
            raise RuntimeError(f"{left} runs did not complete in {timeout:.0f} s: {waiting}")
        if left != last:
            last, since = left, time.monotonic()
        elif time.monotonic() - since > 5:
            # No run completed for 5 s: answer the ones that wait on a person again.
            since = time.monotonic()
            async for wf in client.list_workflows(running):
                handle = client.get_workflow_handle(wf.id)
                raw = (await handle.describe()).raw_description
                if raw.HasField("pending_workflow_task") or raw.pending_activities:
                    continue
                again += 1
                await handle.signal(c.SIGNAL_INPUT, {"node_id": node_id, "text": "that one"})
        await asyncio.sleep(0.25)
    await wait_all(client, ids)
    return again


async def rss_at_rest(pid: int, still_s: float = 4.0, timeout: float = 20.0) -> int:
    """The worker's RSS once it has come to rest: no lower for `still_s` seconds (at most
    `timeout`). OpenFlow's worker gives back what a burst left free once it has been quiet
    for two seconds (`openflow.memory`); both sides are read the same way."""
    low, since = proc_rss(pid), time.monotonic()
    deadline = since + timeout
    while time.monotonic() - since < still_s and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        rss = proc_rss(pid)
        if rss < low:
            low, since = rss, time.monotonic()
    return proc_rss(pid)


async def paused(bench: Bench, side: str, n: int, out: Figures) -> None:
    ours = side != "bare"

    async def count_paused(queue: str) -> int:
        query = f'TaskQueue="{queue}" AND {c.SA_STATUS}="paused"'
        return (await bench.client.count_workflows(query)).count

    async def work(queue: str, proc: WorkerProcess) -> tuple[float, float, int]:
        if ours:
            write_scripted_settings(
                bench.home,
                {"busy": [{"ask": "Which one?"}, {"submit": {"summary": "ok"}}]},
                exhausted="echo",
            )
        rss0 = await rss_at_rest(proc.pid)  # the warm-up's garbage gone before the baseline
        if ours:
            ids = await start_ours(bench.client, queue, single(requestUserInput=True), n)
        else:
            ids = await start_bare(bench.client, queue, BarePaused.run, None, n)
        deadline = time.monotonic() + 120
        while await count_paused(queue) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{side}: not all {n} runs paused within 120 s")
            await asyncio.sleep(0.25)
        per_run = (await rss_at_rest(proc.pid) - rss0) / n
        gate = asyncio.Semaphore(64)

        async def answer(run_id: str) -> None:
            handle = bench.client.get_workflow_handle(run_id)
            async with gate:
                if ours:
                    await handle.signal(c.SIGNAL_INPUT, {"node_id": "busy", "text": "that one"})
                else:
                    await handle.signal("answer", "that one")

        began = time.perf_counter()
        await asyncio.gather(*(answer(i) for i in ids))
        if ours:
            again = await drive_paused(bench.client, queue, ids)
        else:
            await wait_all(bench.client, ids)
            again = 0
        return per_run, n / (time.perf_counter() - began), again

    (per_run, rate, again), _, _, _ = await bench.measured(side, None, work)
    out.values["memory KB/paused run"] = per_run / 1024
    out.values["answers/s"] = rate
    out.values["answers again (turns lost)"] = again


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


PHASES = ("throughput", "latency", "unbalanced", "flight", "paused")

# --- the report --------------------------------------------------------------------------

#: Figure, whether higher is better, and the goal as a ratio to bare (None: no goal).
GOALS: dict[str, tuple[bool, float | None]] = {
    "runs/s": (True, None),
    "activities/s": (True, 0.85),
    "worker CPU ms/run": (False, 1.3),
    "server CPU ms/run": (False, None),
    "history bytes/run": (False, 2.0),
    "start to first model turn ms": (False, 1.2),
    "start to end ms (one at a time)": (False, None),
    "unbalanced DAG critical path ms": (False, 1.03),
    "memory KB/paused run": (False, None),
    "answers/s": (True, None),
}


def report(rounds: dict[str, list[Figures]]) -> None:
    sides = list(rounds)
    names: list[str] = []
    for figures in rounds.values():
        for fig in figures:
            names += [k for k in fig.values if k not in names]
    header = f"{'':38s}" + "".join(f"{s:>12s}" for s in sides)
    header += "".join(f"{s + '/bare':>13s}" for s in sides if s != "bare")
    print(header + "   goal")
    for name in names:
        medians = {
            s: statistics.median(f.values[name] for f in rounds[s] if name in f.values)
            for s in sides
            if any(name in f.values for f in rounds[s])
        }
        line = f"{name:38s}" + "".join(
            f"{medians[s]:12.1f}" if s in medians else f"{'-':>12s}" for s in sides
        )
        bare = medians.get("bare")
        for s in sides:
            if s == "bare":
                continue
            ratios = [
                ours.values[name] / theirs.values[name]
                for ours, theirs in zip(rounds[s], rounds["bare"], strict=False)
                if name in ours.values and theirs.values.get(name)
            ]
            line += f"{statistics.median(ratios):12.2f}x" if ratios and bare else f"{'':13s}"
        goal = GOALS.get(name)
        if goal is not None and goal[1] is not None:
            line += f"   {'>=' if goal[0] else '<='} {goal[1]:g}x"
        print(line)


@asynccontextmanager
async def embedded_bench(prefix: str, **options: Any) -> AsyncIterator[Bench]:
    """A tuned embedded server in a fresh folder, and the bench over it; the client's run store
    is the workers', as in a deployment (a run's workflow goes there)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        home = Path(tmp) / "home"
        os.environ["OPENFLOW_HOME"] = str(home)
        server = EmbeddedServer(
            Path(tmp) / "server", address=f"127.0.0.1:{free_port()}", ui=False, tuned=True
        )
        async with server:
            client = await server.connect()  # the project's converter
            assert server._process is not None
            yield Bench(client, server._process.pid, server.address, home, **options)


async def main_async(args: argparse.Namespace) -> None:
    quick = args.quick
    n_batch = args.runs or (40 if quick else 200)
    n_flight = args.flight or (100 if quick else 200)
    n_paused = args.paused or (100 if quick else 500)
    delay_s = 5.0
    rounds = args.rounds or (1 if quick else 3)
    phases = set(args.only.split(",")) if args.only else set(PHASES)
    async with embedded_bench(
        "openflow-scale-",
        before=args.before,
        extra_env=dict(item.split("=", 1) for item in args.env),
        profile=args.profile,
    ) as bench:
        sides = ["bare", "ours"] + (["before"] if args.before else [])
        results: dict[str, list[Figures]] = {s: [] for s in sides}
        for round_no in range(rounds):
            order = sides if round_no % 2 == 0 else list(reversed(sides))
            figures = {s: Figures() for s in sides}
            for side in order:
                _progress(f"round {round_no + 1}: {side}")
                if "throughput" in phases:
                    began = time.perf_counter()
                    await throughput(bench, side, n_batch, figures[side])
                    _progress(f"  {side} throughput: {time.perf_counter() - began:.0f} s")
                if "latency" in phases:
                    began = time.perf_counter()
                    await latency(bench, side, 5, figures[side])
                    _progress(f"  {side} latency: {time.perf_counter() - began:.0f} s")
                if "unbalanced" in phases:
                    began = time.perf_counter()
                    await unbalanced_dag(bench, side, 3, args.hop_delay, figures[side])
                    _progress(f"  {side} unbalanced: {time.perf_counter() - began:.0f} s")
                if "flight" in phases:
                    began = time.perf_counter()
                    await in_flight(bench, side, n_flight, delay_s, figures[side])
                    _progress(f"  {side} flight: {time.perf_counter() - began:.0f} s")
                if "paused" in phases:
                    began = time.perf_counter()
                    await paused(bench, side, n_paused, figures[side])
                    _progress(f"  {side} paused: {time.perf_counter() - began:.0f} s")
            for side in sides:
                results[side].append(figures[side])
        print(
            f"scale on one worker: {n_batch}-run batch, {n_flight} runs in flight, "
            f"{n_paused} paused; unbalanced DAG turns of {args.hop_delay:g} s; "
            f"median of {rounds} interleaved round(s); "
            f"{os.cpu_count()} cores"
        )
        report(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="OpenFlowRun under load against bare Temporal")
    parser.add_argument("--quick", action="store_true", help="smaller batches, one round")
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--runs", type=int, default=0, help="runs in the throughput batch")
    parser.add_argument("--flight", type=int, default=0, help="runs with a slow model turn")
    parser.add_argument("--paused", type=int, default=0, help="runs waiting for a person")
    parser.add_argument(
        "--hop-delay",
        type=float,
        default=1.0,
        help="seconds each model turn of the unbalanced DAG takes (default 1)",
    )
    parser.add_argument(
        "--before", type=Path, help="also measure the worker of the code checked out here"
    )
    parser.add_argument(
        "--only", help=f"comma-separated measurements to take, of {','.join(PHASES)}"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a variable for OpenFlow's workers, e.g. OPENFLOW_STICKY_TIMEOUT=1 (repeatable)",
    )
    parser.add_argument(
        "--profile", type=Path, help="sample each worker with py-spy; samples and tops go here"
    )
    parser.add_argument("--serve-bare", nargs=3, metavar=("ADDRESS", "QUEUE", "CAP"))
    args = parser.parse_args(argv)
    if args.serve_bare:
        address, queue, cap = args.serve_bare
        asyncio.run(serve_bare(address, queue, int(cap) or None))
        return 0
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["dag", "main", "single"]
