"""What a run waiting for a person holds on its worker, attributed part by part.

    python -m bench.paused_memory [--runs N] [--warm N] [--top K] [--bare]

One process: an embedded server, the worker (`openflow.worker.build_worker`) and the client.
It pauses `--warm` runs first (so every per-process cache is filled), then, with tracemalloc
tracing, `--runs` more, each waiting for a person (`requestUserInput`, as `bench.scale`'s
paused phase). Every figure is per paused run:

- the Python heap the N runs added (tracemalloc, after a collection), by file and line;
- a walk of what each cached workflow references (`gc.get_referents` from the SDK's
  instance and OpenFlowRun's attributes), counting only objects allocated while the N runs
  started and each object once: by attribute, and by object type; objects more than one run
  reaches are shared, and counted apart;
- the process's RSS growth (it includes the SDK core's own memory, which tracemalloc misses);
- a paused run's history so far (the SDK core's memory for a cached run grows with it).

With `--bare`, the same for `bench.scale`'s bare paused workflow on the same server.
Deterministic enough to compare before and after a change by bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import os
import sys
import time
import tracemalloc
import types
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.floor import noop
from bench.scale import (
    BarePaused,
    drive_paused,
    embedded_bench,
    proc_rss,
    single,
    start_bare,
    start_ours,
    wait_all,
)
from openflow import contracts as c
from openflow.testing import write_scripted_settings
from openflow.worker import build_worker

#: Runs started at once: few enough that the one process keeps every workflow task short.
BATCH = 20
SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def running(worker: Worker) -> dict[str, Any]:
    """The SDK's cached workflows of `worker`, by run id."""
    return dict(worker._workflow_worker._running_workflows)  # type: ignore[union-attr]


async def count_paused(client: Client, queue: str) -> int:
    query = f'TaskQueue="{queue}" AND {c.SA_STATUS}="paused"'
    return (await client.count_workflows(query)).count


async def until_paused(client: Client, queue: str, n: int) -> None:
    deadline = time.monotonic() + 300
    while await count_paused(client, queue) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"not all {n} runs paused within 300 s")
        await asyncio.sleep(0.25)
    await asyncio.sleep(0.1)


def parts(name: str, value: Any, depth: int) -> Iterable[tuple[str, Any]]:
    """`value`'s attributes (a pydantic model's fields, a plain object's attributes) as roots
    of their own, `depth` levels down; the rest of it under `name`."""
    fields = getattr(type(value), "model_fields", None)
    attrs = (
        {k: getattr(value, k) for k in fields}
        if fields is not None
        else {f"[{k}]": v for k, v in value.items() if isinstance(k, str)}
        if isinstance(value, dict)
        else vars(value)
        if hasattr(value, "__dict__") and not isinstance(value, SKIP)
        else None
    )
    if depth and attrs:
        for key, item in attrs.items():
            yield from parts(f"{name}.{key}", item, depth - 1)
    yield name, value


def roots(instance: Any) -> Iterable[tuple[str, Any]]:
    """What one cached workflow holds: the workflow object's attributes, the locals of the
    run method's frames, the SDK's instance attributes (each object counts under the first)."""
    obj = instance._object
    for name, value in vars(obj).items():
        yield from parts(f"run.{name}", value, 4 if name == "_snapshot" else 2)
    task = instance._primary_task
    coro = task.get_coro() if task is not None else None
    while isinstance(coro, types.CoroutineType):
        frame = coro.cr_frame
        if frame is not None:
            for name, value in frame.f_locals.items():
                if name != "self":
                    yield f"frame.{coro.__qualname__}.{name}", value
        coro = coro.cr_await
    for name, value in vars(instance).items():
        if name != "_object":
            yield f"sdk.{name}", value


class Baseline:
    """Every object alive before the measured runs started (held, so no id is reused)."""

    def __init__(self) -> None:
        gc.collect()
        tracked = gc.get_objects()
        held: list[Any] = list(tracked)
        for obj in tracked:
            held.extend(gc.get_referents(obj))
        self.held = held
        self.ids = {id(o) for o in held}


def walk(start: Any, seen: set[int], old: set[int]) -> Iterable[Any]:
    """Every object reachable from `start` not in `seen` (which it fills) nor alive before
    the measured runs started, types and modules left out."""
    stack = [start]
    while stack:
        obj = stack.pop()
        key = id(obj)
        if key in seen or key in old or isinstance(obj, SKIP):
            continue
        seen.add(key)
        yield obj
        stack.extend(gc.get_referents(obj))


def attribute(instances: list[Any], old: set[int]) -> None:
    """Per-run bytes by root attribute and object type; objects several runs reach apart."""
    n = len(instances)
    reached: Counter[int] = Counter()
    per_run: list[list[tuple[str, list[Any]]]] = []
    for inst in instances:
        seen: set[int] = {id(inst), id(inst._object), id(vars(inst)), id(vars(inst._object))}
        parts = []
        for name, value in roots(inst):
            objs = list(walk(value, seen, old))
            parts.append((name, objs))
            reached.update(id(o) for o in objs)
        per_run.append(parts)
    by_root: dict[str, float] = defaultdict(float)
    by_type: dict[str, float] = defaultdict(float)
    counts: dict[str, float] = defaultdict(float)
    shared_bytes = 0.0
    shared_ids: set[int] = set()
    for parts in per_run:
        for name, objs in parts:
            for o in objs:
                size = sys.getsizeof(o)
                if reached[id(o)] > 1:
                    if id(o) not in shared_ids:
                        shared_ids.add(id(o))
                        shared_bytes += size
                    continue
                by_root[name] += size / n
                by_type[type(o).__qualname__] += size / n
                counts[type(o).__qualname__] += 1 / n
    own = sum(by_root.values())
    print(f"\nreferents walk: {own / 1024:.1f} KB a run of its own objects,")
    print(f"  {shared_bytes / 1024:.1f} KB shared by runs in all ({len(shared_ids)} objects)")
    print("  by root (bytes a run):")
    for name, size in sorted(by_root.items(), key=lambda kv: -kv[1])[:25]:
        print(f"    {size:9.0f}  {name}")
    print("  by type (bytes a run, objects a run):")
    for name, size in sorted(by_type.items(), key=lambda kv: -kv[1])[:25]:
        print(f"    {size:9.0f}  {counts[name]:7.1f}  {name}")


def heap_report(
    before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, n: int, top: int, frames: int
) -> None:
    stats = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in stats)
    print(f"\ntracemalloc: {total / n / 1024:.1f} KB a run of Python heap")
    by_file: dict[str, int] = defaultdict(int)
    for s in stats:
        path = s.traceback[0].filename
        by_file[_short(path)] += s.size_diff
    print("  by file (bytes a run):")
    for path, size in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {size / n:9.0f}  {path}")
    print("  by line (bytes a run):")
    for s in stats[:top]:
        frame = s.traceback[0]
        print(f"    {s.size_diff / n:9.0f}  {_short(frame.filename)}:{frame.lineno}")
    if frames > 1:
        print(f"  by traceback ({frames} frames, bytes a run):")
        for s in after.compare_to(before, "traceback")[:top]:
            print(f"    {s.size_diff / n:9.0f}")
            for frame in s.traceback:
                print(f"               {_short(frame.filename)}:{frame.lineno}")


def _short(path: str) -> str:
    for marker in ("site-packages/", "/openflow/", "/bench/"):
        if marker in path:
            return (
                path.split(marker, 1)[1]
                if marker == "site-packages/"
                else marker[1:] + path.split(marker, 1)[1]
            )
    return Path(path).name


async def measure(bare: bool, n: int, warm: int, top: int, frames: int) -> None:
    async with embedded_bench("openflow-paused-", before=None) as bench:
        queue = f"paused-{uuid.uuid4().hex[:8]}"
        script = {"busy": [{"ask": "Which one?"}, {"submit": {"summary": "ok"}}]}
        write_scripted_settings(bench.home, script, exhausted="echo")
        if bare:
            worker: Any = Worker(
                bench.client,
                task_queue=queue,
                workflows=[BarePaused],
                activities=[noop],
                workflow_runner=UnsandboxedWorkflowRunner(),
            )
            main = worker
        else:
            worker = build_worker(bench.client, queue, bench.home)
            main = worker.main
        task = asyncio.create_task(worker.run())

        paused = 0

        async def pause(k: int) -> list[str]:
            """Start `k` runs, a batch at a time (one process hosts both ends), until paused."""
            nonlocal paused
            ids: list[str] = []
            while len(ids) < k:
                size = min(BATCH, k - len(ids))
                if bare:
                    ids += await start_bare(bench.client, queue, BarePaused.run, None, size)
                else:
                    wf = single(requestUserInput=True)
                    ids += await start_ours(bench.client, queue, wf, size)
                paused += size
                await until_paused(bench.client, queue, paused)
            return ids

        try:
            warm_ids = await pause(warm)
            gc.collect()
            rss0, trimmed0, malloc0 = proc_rss_self(), trimmed_rss(), malloc_in_use()
            untraced = await pause(n)
            gc.collect()
            rss1, trimmed1, malloc1 = proc_rss_self(), trimmed_rss(), malloc_in_use()
            baseline = Baseline()
            tracemalloc.start(frames)
            before = tracemalloc.take_snapshot()
            ids = await pause(n)
            gc.collect()
            after = tracemalloc.take_snapshot()
            cached = running(main)
            instances = [cached[r].instance for r in cached if _workflow_id(cached[r]) in set(ids)]
            side = "bare" if bare else "ours"
            print(
                f"{side}: {n} paused runs measured twice ({warm} paused before), {len(instances)} cached"
            )
            print(
                f"untraced: RSS {(rss1 - rss0) / n / 1024:.1f} KB a run "
                f"(the client's and the SDK core's too), {(trimmed1 - trimmed0) / n / 1024:.1f} "
                f"KB after malloc_trim; malloc in use {(malloc1 - malloc0) / n / 1024:.1f} KB"
            )
            size, events = await history_bytes(bench.client, ids)
            print(f"history so far: {size:,.0f} B in {events:.0f} events a run")
            heap_report(before, after, n, top, frames)
            attribute(instances, baseline.ids)
            del baseline
            tracemalloc.stop()
            await answer_all(bench.client, queue, [*warm_ids, *untraced, *ids], bare)
        finally:
            await worker.shutdown()
            await task


def _workflow_id(running_workflow: Any) -> str:
    return str(running_workflow.workflow_id)


def proc_rss_self() -> int:
    return proc_rss(os.getpid())


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    ]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _MallInfo2


def malloc_in_use() -> int:
    """Bytes malloc has handed out and not had back (the SDK core's, pydantic-core's, and
    Python objects over 512 bytes; pymalloc's small-object arenas are apart)."""
    info = _libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def trimmed_rss() -> int:
    """RSS once malloc has given back to the system what it holds free."""
    _libc.malloc_trim(0)
    return proc_rss_self()


async def history_bytes(client: Client, ids: list[str], sample: int = 20) -> tuple[float, float]:
    """A paused run's history so far, bytes and events (the mean of `sample` runs): what the
    SDK core holds of a cached run grows with it."""
    sizes, counts = [], []
    for run_id in ids[:sample]:
        history = await client.get_workflow_handle(run_id).fetch_history()
        sizes.append(sum(event.ByteSize() for event in history.events))
        counts.append(len(history.events))
    return sum(sizes) / len(sizes), sum(counts) / len(counts)


async def answer_all(client: Client, queue: str, ids: list[str], bare: bool) -> None:
    gate = asyncio.Semaphore(64)

    async def answer(run_id: str) -> None:
        handle = client.get_workflow_handle(run_id)
        async with gate:
            if bare:
                await handle.signal("answer", "that one")
            else:
                await handle.signal(c.SIGNAL_INPUT, {"node_id": "busy", "text": "that one"})

    await asyncio.gather(*(answer(i) for i in ids))
    if bare:
        await wait_all(client, ids)
    else:
        # Runs whose turns the loaded worker lost pause again (`bench.scale.drive_paused`).
        again = await drive_paused(client, queue, ids)
        if again:
            print(f"answered {again} runs again: their turns were lost under load")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="what a paused run holds on its worker")
    parser.add_argument("--runs", type=int, default=200, help="paused runs measured")
    parser.add_argument("--warm", type=int, default=20, help="paused runs before measuring")
    parser.add_argument("--top", type=int, default=25, help="lines of each table")
    parser.add_argument(
        "--frames", type=int, default=1, help="frames of each allocation's traceback to group by"
    )
    parser.add_argument("--bare", action="store_true", help="bare Temporal's paused workflow")
    args = parser.parse_args(argv)
    asyncio.run(measure(args.bare, args.runs, args.warm, args.top, args.frames))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
