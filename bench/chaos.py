"""A reliability campaign: crashes, stops, hostile input and escape attempts against real runs.

    python -m bench.chaos [--short] [--runs N] [--kills N] [--payloads N] [--only NAME]... [--seed S]

The campaign starts a Temporal server of its own (SQLite file in a temporary folder), worker
processes (`openflow worker`) and the HTTP API in process, plants a provider key and a tenant key
in its settings.json, and then attacks runs the way a crash, an operator or a script would:

- worker kill -9 at random points across many runs, and one run killed many times;
- the Temporal server killed mid-run and restarted, the workers staying up;
- runs stopped and resumed while others run;
- malformed signals, updates and queries (hypothesis-generated) for every handler;
- malformed CLI input and HTTP requests;
- path escapes through the model's file tools, and a scan for the planted secrets.

Each scenario reports attempts, held and failed. An attempt holds when nothing ran twice (the
ledger files the runs' `bash` calls append to), nothing is stuck (every run reaches its end or its
expected pause within a deadline), nothing failed that should not, nothing left the run's folder
and no planted secret shows up. Exits 1 when any attempt failed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter

from openflow.client import Runs
from openflow.engine import RunEvent, WorkflowRunState
from openflow.engine.spec import Workflow
from openflow.server import EmbeddedServer, free_port
from openflow.testing import agent_node

ROOT = Path(__file__).resolve().parents[1]
PROVIDER_SECRET = "sk-chaos-provider-" + "7f3a9c1e5b2d4086"
TENANT_SECRET = "chaos-tenant-key-" + "e41b7d20c9a8f356"
TENANT = "chaos"
SECRETS = (PROVIDER_SECRET, TENANT_SECRET)
RUN_DEADLINE = 120.0
"""Seconds a run may take to reach its end or expected pause before it counts as stuck."""

TERMINAL = ("completed", "failed", "stopped")
NOTES_SHOWN = 6


@dataclass
class Tally:
    """One scenario's figures, with a note for every attempt that did not hold."""

    scenario: str
    attempts: int = 0
    held: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> int:
        return self.attempts - self.held

    def record(self, ok: bool, note: str = "") -> bool:
        self.attempts += 1
        if ok:
            self.held += 1
        elif note:
            self.notes.append(note)
        return ok


@dataclass
class Worker:
    """A worker process (`openflow worker`) and the file its output goes to."""

    process: subprocess.Popen[bytes]
    log: Path
    polling: bool = False

    @property
    def alive(self) -> bool:
        return self.polling and self.process.poll() is None

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class Campaign:
    """The campaign's own server, home with planted secrets, workers, and every run it started."""

    def __init__(self, root: Path | None = None, seed: int | None = None) -> None:
        self._own_root = root is None
        self.root = root or Path(tempfile.mkdtemp(prefix="openflow-chaos-"))
        self.home = self.root / "home"
        self.logs = self.root / "logs"
        self.task_queue = f"chaos-{uuid.uuid4().hex[:8]}"
        self.server = EmbeddedServer(
            self.home, address=f"127.0.0.1:{free_port()}", ui_port=free_port()
        )
        self.random = random.Random(seed)
        self.seed = seed
        self.run_ids: list[str] = []
        self.tenant_runs: list[str] = []
        """Runs started over HTTP, under the planted tenant."""
        self.texts: dict[str, str] = {}
        """What users saw outside history and events (CLI output, API responses), for the scan."""
        self.workers: list[Worker] = []
        self._client: Client | None = None
        self._profiles: dict[str, Any] = {}
        self.mcp_servers: dict[str, Any] = {}
        """settings.json's `mcp.servers` (set and cleared by the scenario that needs one)."""
        self._ready: Worker | None = None

    # --- set-up ---------------------------------------------------------------------------

    async def __aenter__(self) -> Campaign:
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.write_settings()
        self._ready = self._standby()
        await self.server.start()
        await self.reconnect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for worker in self.workers:
            worker.stop()
        await self.server.stop()
        for worker in self.workers:
            if worker.process.stdin is not None:
                with contextlib.suppress(OSError):
                    worker.process.stdin.close()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    async def reconnect(self) -> Client:
        self._client = await self.server.connect(data_converter=pydantic_data_converter)
        return self._client

    @property
    def client(self) -> Client:
        assert self._client is not None, "use the campaign in `async with`"
        return self._client

    @property
    def runs(self) -> Runs:
        return Runs(self.client, self.task_queue)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of the campaign's `openflow` processes."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OPENFLOW_", "TEMPORAL_")) and not k.endswith("_API_KEY")
        }
        env.update(
            OPENFLOW_HOME=str(self.home),
            OPENFLOW_TEMPORAL_ADDRESS=self.server.address,
            OPENFLOW_TASK_QUEUE=self.task_queue,
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def profile(self, name: str, script: dict[str, list[dict[str, Any]]]) -> str:
        """Add a scripted provider profile (carrying the planted key) and return its id."""
        self._profiles[name] = {
            "kind": "scripted",
            "default_model": "test-model",
            "api_key": PROVIDER_SECRET,
            "script": script,
            "exhausted": "echo",
        }
        self.write_settings()
        return name

    def write_settings(self) -> None:
        data: dict[str, Any] = {
            "active_provider": "planted",
            "providers": {
                "planted": {
                    "kind": "scripted",
                    "default_model": "test-model",
                    "api_key": PROVIDER_SECRET,
                    "exhausted": "echo",
                },
                **self._profiles,
            },
            "api_keys": {TENANT_SECRET: TENANT},
        }
        if self.mcp_servers:
            data["mcp"] = {"servers": self.mcp_servers}
        path = self.home / "settings.json"
        temp = path.with_suffix(".tmp")
        temp.write_text(json.dumps(data, indent=2))
        temp.replace(path)

    # --- workers --------------------------------------------------------------------------

    def _standby(self) -> Worker:
        log = self.logs / f"worker-{len(self.workers) + 1}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "bench.chaos_worker"],
                cwd=ROOT,
                env=self.env(),
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        worker = Worker(process, log)
        self.workers.append(worker)
        return worker

    def spawn_worker(self, timeout: float = 90.0) -> Worker:
        """Start a worker (the standby one, loaded ahead) and return once it polls."""
        worker = self._ready or self._standby()
        self._ready = None
        deadline = time.monotonic() + timeout
        while b"standby" not in worker.log.read_bytes():
            if worker.process.poll() is not None or time.monotonic() > deadline:
                worker.kill()
                raise RuntimeError(f"worker did not load; see {worker.log}")
            time.sleep(0.05)
        assert worker.process.stdin is not None
        worker.process.stdin.write(b"go\n")
        worker.process.stdin.flush()
        while b"Worker on" not in worker.log.read_bytes():
            if worker.process.poll() is not None or time.monotonic() > deadline:
                worker.kill()
                raise RuntimeError(f"worker did not start; see {worker.log}")
            time.sleep(0.05)
        worker.polling = True
        self._ready = self._standby()
        return worker

    def kill_workers(self) -> int:
        """kill -9 every polling worker; returns how many there were."""
        alive = [w for w in self.workers if w.alive]
        for worker in alive:
            worker.kill()
        return len(alive)

    async def ensure_worker(self) -> None:
        if not any(w.alive for w in self.workers):
            await self.spawn_worker_async()

    async def spawn_worker_async(self) -> Worker:
        return await asyncio.to_thread(self.spawn_worker)

    # --- runs -----------------------------------------------------------------------------

    def folder(self, name: str) -> Path:
        """A fresh project folder for one run's tools."""
        path = self.root / "work" / f"{name}-{uuid.uuid4().hex[:6]}"
        path.mkdir(parents=True)
        return path

    async def start(self, wf: Workflow, profile: str, project: Path, entrypoint: str = "go") -> str:
        run_id = await self.runs.start(
            wf, entrypoint=entrypoint, project_dir=str(project), provider_id=profile
        )
        self.run_ids.append(run_id)
        return run_id

    async def status(self, run_id: str, tenant: str = "") -> str:
        """The run's status as a user sees it (`runs show`); "unknown" while it cannot be read."""
        try:
            return await Runs(self.client, self.task_queue, tenant).status(run_id)
        except Exception:  # noqa: BLE001 - a server blip or a run not started yet
            return "unknown"

    async def settle(
        self,
        run_id: str,
        deadline: float = RUN_DEADLINE,
        until: tuple[str, ...] = TERMINAL,
        tenant: str = "",
    ) -> str:
        """Wait for the run to reach one of `until`; "stuck: <status>" past the deadline."""
        end = time.monotonic() + deadline
        status = "unknown"
        while time.monotonic() < end:
            status = await self.status(run_id, tenant)
            if status in until and (status not in TERMINAL or not await self.is_running(run_id)):
                return status
            await asyncio.sleep(0.2)
        return f"stuck: {status}"

    async def events(self, run_id: str, tenant: str = "") -> list[RunEvent]:
        for _ in range(50):
            try:
                return await Runs(self.client, self.task_queue, tenant).events(run_id)
            except Exception:  # noqa: BLE001 - a server coming back
                await asyncio.sleep(0.2)
        return []

    async def raw_events(self, run_id: str, tenant: str = "") -> list[dict[str, Any]]:
        """The `events` query's JSON as it is, field for field (for the secret scan)."""
        for _ in range(50):
            try:
                return await Runs(self.client, self.task_queue, tenant).raw_events(run_id)
            except Exception:  # noqa: BLE001 - a server coming back
                await asyncio.sleep(0.2)
        return []

    async def state(self, run_id: str) -> WorkflowRunState | None:
        try:
            return await self.runs.state(run_id)
        except Exception:  # noqa: BLE001 - not answering yet
            return None

    async def wait_state(
        self,
        run_id: str,
        predicate: Callable[[WorkflowRunState], object],
        deadline: float = 60.0,
    ) -> bool:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            state = await self.state(run_id)
            if state is not None and predicate(state):
                return True
            await asyncio.sleep(0.1)
        return False

    async def histories(self, run_id: str) -> list[str]:
        """Every execution's history of the run (resumes and continue-as-new), as JSON."""
        out = []
        async for execution in self.client.list_workflows(f"WorkflowId = '{run_id}'"):
            handle = self.client.get_workflow_handle(run_id, run_id=execution.run_id)
            history = await handle.fetch_history()
            raw = history.to_json()
            out.append(raw)
            out.extend(_payload_texts(json.loads(raw)))
        return out

    async def is_running(self, run_id: str) -> bool:
        """Whether the run's latest execution is still open (a stopping run still is)."""
        try:
            desc = await self.client.get_workflow_handle(run_id).describe()
        except Exception:  # noqa: BLE001 - a server blip: not known to be closed
            return True
        return desc.status == WorkflowExecutionStatus.RUNNING


def _payload_texts(node: Any) -> Iterator[str]:
    """The decoded data of every payload in a history's JSON (where it is base64)."""
    if isinstance(node, dict):
        data = node.get("data")
        if isinstance(data, str) and "metadata" in node:
            with contextlib.suppress(ValueError):
                yield base64.b64decode(data).decode("utf-8", errors="replace")
        for value in node.values():
            yield from _payload_texts(value)
    elif isinstance(node, list):
        for value in node:
            yield from _payload_texts(value)


def make_workflow(
    wf_id: str,
    nodes: list[dict[str, Any]],
    edges: list[tuple[str, str]] = (),  # type: ignore[assignment]
) -> Workflow:
    """A workflow of agent nodes whose tools run without asking."""
    return Workflow.model_validate(
        {
            "id": wf_id,
            "name": f"Chaos {wf_id}",
            "nodes": nodes,
            "edges": [{"id": f"{a}-{b}", "from": a, "to": b} for a, b in edges],
        }
    )


def yolo_node(node_id: str, **agent: Any) -> dict[str, Any]:
    return agent_node(node_id, tools={"approvalMode": "yolo"}, **agent)


def ledger_lines(folder: Path) -> list[str]:
    path = folder / "ledger.txt"
    return path.read_text().split() if path.exists() else []


def duplicates(lines: list[str]) -> list[str]:
    return sorted({line for line in lines if lines.count(line) > 1})


def first(items: list[str], count: int = 3) -> str:
    return ", ".join(items[:count]) + (" ..." if len(items) > count else "")


# --- the campaign ---------------------------------------------------------------------------


@dataclass
class Plan:
    """How much of each scenario to run."""

    kill_rounds: int = 6
    runs_per_round: int = 3
    kills_of_one_run: int = 8
    prepare_kills: int = 3
    server_rounds: int = 3
    stop_runs: int = 8
    stops: int = 16
    payloads: int = 30
    http_payloads: int = 120
    cli_cases: int = 0
    """0: every CLI case."""
    race_calls: int = 300

    @classmethod
    def short(cls) -> Plan:
        """The version CI runs: every scenario, a few attempts each."""
        return cls(
            kill_rounds=1,
            runs_per_round=2,
            kills_of_one_run=1,
            prepare_kills=1,
            server_rounds=1,
            stop_runs=3,
            stops=3,
            payloads=3,
            http_payloads=14,
            cli_cases=3,
            race_calls=12,
        )


Scenario = Callable[[Campaign, Plan], Awaitable[list[Tally]]]


def scenarios() -> dict[str, Scenario]:
    """Every scenario by name, in the order the campaign runs them (the secret scan last)."""
    from bench import chaos_crashes, chaos_escapes, chaos_input, chaos_signals

    return {
        "worker-kill": chaos_crashes.worker_kills,
        "prepare-kill": chaos_crashes.prepare_kills,
        "server-kill": chaos_crashes.server_kills,
        "stop-resume": chaos_crashes.stop_and_resume,
        "signals": chaos_signals.signal_flood,
        "cli": chaos_input.cli_input,
        "http": chaos_input.http_requests,
        "escapes": chaos_escapes.path_escapes,
        "secrets": chaos_escapes.secret_scan,
    }


async def run_campaign(
    plan: Plan, only: list[str] | None = None, seed: int | None = None, keep: bool = False
) -> list[Tally]:
    tallies: list[Tally] = []
    root = Path(tempfile.mkdtemp(prefix="openflow-chaos-")) if keep else None
    async with Campaign(root, seed=seed) as campaign:
        if keep:
            print(f"campaign folder: {campaign.root}", flush=True)
        for name, scenario in scenarios().items():
            if only and name not in only and name != "secrets":
                continue
            started = time.monotonic()
            print(f"... {name}", flush=True)
            try:
                found = await scenario(campaign, plan)
            except Exception as exc:  # noqa: BLE001 - a scenario that breaks counts as failed
                found = [Tally(name, attempts=1, notes=[f"scenario broke: {exc!r}"])]
            for tally in found:
                tally.seconds = time.monotonic() - started
            tallies.extend(found)
            for tally in found:
                print(f"    {tally.scenario}: {tally.held}/{tally.attempts} held", flush=True)
    return tallies


def table(tallies: list[Tally]) -> str:
    width = max([len(t.scenario) for t in tallies] + [8])
    lines = [f"{'scenario':<{width}}  attempts  held  failed  seconds"]
    for t in tallies:
        lines.append(
            f"{t.scenario:<{width}}  {t.attempts:>8}  {t.held:>4}  {t.failed:>6}  {t.seconds:>7.1f}"
        )
    if any(t.notes for t in tallies):
        lines += ["", "failures (a few of each):"]
    for t in tallies:
        for note in t.notes[:NOTES_SHOWN]:
            lines.append(f"  {t.scenario}: {note}")
        if len(t.notes) > NOTES_SHOWN:
            lines.append(f"  {t.scenario}: ... and {len(t.notes) - NOTES_SHOWN} more")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--short", action="store_true", help="the small version CI runs")
    parser.add_argument("--runs", type=int, help="worker-kill rounds (each of several runs)")
    parser.add_argument("--kills", type=int, help="kills of the one run killed many times")
    parser.add_argument("--payloads", type=int, help="generated payloads per handler")
    parser.add_argument("--only", action="append", choices=sorted(scenarios()), help="repeatable")
    parser.add_argument("--seed", type=int, help="for the random kill points and payloads")
    parser.add_argument("--keep", action="store_true", help="keep the campaign folder (logs)")
    args = parser.parse_args(argv)
    plan = Plan.short() if args.short else Plan()
    if args.runs is not None:
        plan.kill_rounds = args.runs
    if args.kills is not None:
        plan.kills_of_one_run = args.kills
    if args.payloads is not None:
        plan.payloads = args.payloads
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"chaos campaign, seed {seed}", flush=True)
    started = time.monotonic()
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        tallies = asyncio.run(run_campaign(plan, args.only, seed, args.keep))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print()
    print(table(tallies))
    print(f"\n{time.monotonic() - started:.0f} s in all")
    return 1 if any(t.failed for t in tallies) else 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
