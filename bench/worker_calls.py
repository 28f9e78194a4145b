"""What the worker does per run of bench.scale's DAG besides the SDK's own work, counted.

    python -m bench.worker_calls [--runs 40] [--rounds 5] [--top 25] [--before DIR]

The runs go through the shell's activity stubs (`openflow.workflows.calls`) and the engine,
with the real activities on a local run store, in one process and without Temporal: each
activity's input and result are encoded and decoded by the pydantic data converter as the SDK
would, and `workflow.patched` answers as for a new run. What is left out is the SDK's part
(activations, payload visitors, polling), which `bench.scale` measures with the rest.

Two figures a run: CPU (process time, the best of `--rounds`, so the machine's other load
counts least) and Python function calls (cProfile in every thread: the same for the same
code, whatever the load), with the functions called most. `--before DIR` runs the same in the
code checked out in DIR and prints both.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import marshal
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class ThreadProfiles:
    """A cProfile in each thread that runs Python from `start` on, merged by `stats`;
    `install` first, before the threads are made."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        self.active = False
        self._lock = threading.Lock()

    def _hook(self, frame: Any, event: str, arg: Any) -> None:
        if self.active:
            sys.setprofile(None)
            self._begin()

    def _begin(self) -> None:
        profile = cProfile.Profile(time.thread_time)
        with self._lock:
            self.profiles.append(profile)
        profile.enable()

    def install(self) -> None:
        threading.setprofile(self._hook)

    def start(self) -> None:
        self.active = True
        self._begin()

    def stats(self) -> dict[tuple[str, int, str], tuple[int, float]]:
        """Calls and own CPU seconds by function, over every thread."""
        merged: dict[tuple[str, int, str], tuple[int, float]] = {}
        threading.setprofile(None)  # type: ignore[arg-type]
        for profile in list(self.profiles):
            profile.snapshot_stats()
            for key, (_, calls, own, _, _) in profile.stats.items():  # type: ignore[attr-defined]
                before = merged.get(key, (0, 0.0))
                merged[key] = (before[0] + calls, before[1] + own)
        return merged


async def measure(runs: int, rounds: int, counted: bool) -> dict[str, Any]:
    """This checkout's CPU a run, or with `counted` its calls (imports here: OPENFLOW_HOME
    must be set first)."""
    profiles = ThreadProfiles()
    if counted:
        profiles.install()
    home = Path(tempfile.mkdtemp(prefix="openflow-worker-calls-"))
    os.environ["OPENFLOW_HOME"] = str(home)
    from temporalio import workflow
    from temporalio.contrib.pydantic import pydantic_data_converter

    from bench.scale import dag
    from openflow import contracts as c
    from openflow.engine import advance as engine
    from openflow.engine.state import CallModel
    from openflow.testing import write_scripted_settings
    from openflow.worker import make_activities
    from openflow.workflows import calls

    converter = pydantic_data_converter.payload_converter
    write_scripted_settings(home, {}, exhausted="echo")
    acts = make_activities(home)
    runs_now: dict[str, str] = {}

    def through_history(value: Any) -> Any:
        return converter.from_payloads(converter.to_payloads([value]), [type(value)])[0]

    async def execute(method: Any, arg: Any, activity_id: str | None = None, **_: Any) -> Any:
        inp = through_history(arg)
        if method.__name__ == "model_turn":
            # What its activity's info would say: the run, and the call its id names.
            update = {"run_id": runs_now["id"]}
            if not inp.call_id and activity_id:
                update["call_id"] = c.activity_call_id(activity_id)
            inp = inp.model_copy(update=update)
            result = await acts.model_turn.model_turn(inp)
        elif method.__name__ == "prepare_run":
            result = await acts.prepare_run.prepare_run(inp)
        else:
            raise RuntimeError(f"the DAG runs no {method.__name__}")
        return through_history(result)

    workflow.execute_activity_method = execute  # type: ignore[assignment]
    workflow.execute_local_activity_method = execute  # type: ignore[assignment]
    workflow.patched = lambda _id: True  # type: ignore[assignment]
    # A run of the newest epoch: `patches.on` asks the workflow object's epoch.
    run_object = type("Run", (), {})()
    workflow.instance = lambda: run_object  # type: ignore[assignment]
    if hasattr(calls, "patches") and hasattr(calls.patches, "begin"):
        calls.patches.begin(run_object)

    async def one_run(wf: Any) -> str:
        run_id = f"run-{uuid.uuid4().hex[:12]}"
        runs_now["id"] = run_id
        data = wf.model_dump_json().encode()
        acts.files.store.put_bytes(run_id, c.workflow_key(c.workflow_digest(data)), data)
        start = c.RunInput(
            run_id=run_id, workflow=wf, entrypoint="bench", workflow_stored=c.workflow_digest(data)
        )
        prepared = await calls.prepare_run(start)
        assert prepared.workflow is not None
        now = 1_000_000
        plan = engine.start(
            prepared.workflow,
            run_id,
            now,
            entrypoint_text="bench",
            execution_dir=prepared.execution_dir,
            tool_names=prepared.tool_names,
            agents=prepared.agents,
            read_tools=prepared.read_tools,
        )
        # The header parts the start stored, as the workflow takes them (`OpenFlowRun`).
        parts, sent = set(calls.stored_parts(prepared, plan.snapshot)), set[str]()
        while not plan.snapshot.finished:
            if not all(isinstance(i, CallModel) for i in plan.intents):
                raise RuntimeError(f"the DAG plans only model calls, not {plan.intents}")
            facts = await asyncio.gather(
                *(
                    calls.model_turn(
                        i,
                        plan.snapshot,
                        prepared.active_provider,
                        sent,
                        parts,
                        getattr(prepared, "profiles", None),
                    )
                    for i in plan.intents
                    if isinstance(i, CallModel)
                )
            )
            now += 10
            plan = engine.advance(plan.snapshot, list(facts), now)
        return plan.snapshot.status

    wf = dag()
    for _ in range(3):
        await one_run(wf)
    if not counted:
        cpu = []
        for _ in range(rounds):
            began = time.process_time()
            for _ in range(runs):
                status = await one_run(wf)
            if status != "completed":
                raise RuntimeError(f"a run ended {status}")
            cpu.append((time.process_time() - began) * 1000 / runs)
        return {"cpu_ms": min(cpu)}
    profiles.start()
    for _ in range(runs):
        await one_run(wf)
    stats = profiles.stats()
    return {
        "calls": sum(n for n, _ in stats.values()) / runs,
        "top": sorted(
            (
                (f"{Path(f).name}:{line}({name})", n / runs)
                for (f, line, name), (n, _) in stats.items()
            ),
            key=lambda kv: -kv[1],
        ),
    }


def run_elsewhere(code: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The figures of the code checked out in `code` (this script run there)."""
    figures: dict[str, Any] = {}
    for mode in ("cpu", "calls"):
        with tempfile.NamedTemporaryFile(suffix=".marshal") as out:
            env = {**os.environ, "PYTHONPATH": str(code)}
            argv = [sys.executable, str(Path(__file__)), "--runs", str(args.runs)]
            argv += ["--rounds", str(args.rounds), "--dump", out.name, "--mode", mode]
            subprocess.run(argv, cwd=code, env=env, check=True)
            figures.update(marshal.loads(Path(out.name).read_bytes()))
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--before", type=Path, help="also measure the code checked out here")
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("cpu", "calls"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dump:
        figures = asyncio.run(measure(args.runs, args.rounds, args.mode == "calls"))
        Path(args.dump).write_bytes(marshal.dumps(figures))
        return 0
    sides = {"ours": run_elsewhere(ROOT, args)}
    if args.before:
        sides["before"] = run_elsewhere(args.before, args)
    print(f"bench.scale's DAG without the SDK, {args.runs} runs (best of {args.rounds} rounds)")
    for side, figures in sides.items():
        print(
            f"{side:>7}: {figures['cpu_ms']:6.2f} ms CPU a run, {figures['calls']:8.0f} calls a run"
        )
    for side, figures in sides.items():
        print(f"\n{side}: the functions called most, calls a run")
        for name, n in figures["top"][: args.top]:
            print(f"  {n:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
