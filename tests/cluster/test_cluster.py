"""A cluster on one machine: the Temporal server, PostgreSQL, three worker processes and two API
processes, each with its own `OPENFLOW_HOME`, sharing nothing but the workspace volume.

Twenty runs of a diamond workflow (two nodes in parallel) make `write` and `bash` calls, while
workers are killed -9 at random and restarted. Every run completes, no `bash` call runs twice (the
ledger each run's calls append to), one approval is answered over HTTP, live deltas streamed by
a worker reach the API's event stream, a stream resumed with `Last-Event-ID` on the other API
process loses and repeats nothing, handoffs and a spilled artifact are served by the API, and no
worker or API process wrote run state into its own home.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from openflow.server import EmbeddedServer, free_port
from openflow.testing import agent_node, write_scripted_settings
from tests.cluster.cluster import (
    API_VARIABLES,
    WORKER_VARIABLES,
    Cluster,
    Process,
    api_healthcheck,
    data_of,
    files_under,
    follow,
    poll,
    process_env,
)
from tests.workflows.conftest import replay_history

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(600)]

RUNS = 20
WORKERS = 3
KILLS = 4
API_KEY = "cluster-key-" + uuid.uuid4().hex
TENANT = "team-cluster"
STREAMED = "Streaming the final words of this run, sixteen characters at a time. " * 3
NODES = ("a", "b", "c", "d")
EDGES = (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"))


def node_turns(node_id: str) -> list[dict[str, Any]]:
    """One batch that appends to the ledger and writes a file, then a submit."""
    bash = f"echo {node_id} >> ledger.txt; sleep 0.3"
    tools: list[dict[str, Any]] = [
        {"name": "bash", "args": {"command": bash}, "id": f"{node_id}-bash"},
        {
            "name": "write",
            "args": {"path": f"{node_id}.txt", "content": f"written by {node_id}\n"},
            "id": f"{node_id}-write",
        },
    ]
    first: dict[str, Any] = {"tools": tools, "delay_ms": 100}
    if node_id == "a":
        tools.append({"name": "bash", "args": {"command": "seq 1 20000"}, "id": "a-spill"})
    if node_id == "d":
        first.update(say=STREAMED, stream=True, delay_ms=400)
    return [first, {"submit": {"summary": f"{node_id} done"}, "delay_ms": 50}]


def workflow(approve_b: bool = False) -> dict[str, Any]:
    nodes = []
    for node_id in NODES:
        asks = approve_b and node_id == "b"
        nodes.append(agent_node(node_id, tools={} if asks else {"approvalMode": "yolo"}))
    return {
        "id": "wf-cluster",
        "name": "Cluster diamond",
        "nodes": nodes,
        "edges": [{"id": f"{a}-{b}", "from": a, "to": b} for a, b in EDGES],
    }


async def compose_healthcheck_passes(api: Process, url: str) -> None:
    """The compose file's API healthcheck, run against this API process, says healthy."""
    command = api_healthcheck()
    if command is None:
        return
    port = url.rsplit(":", 1)[1]
    command = [sys.executable if command[0] == "python" else command[0], *command[1:]]
    command = [part.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for part in command]
    done = await asyncio.to_thread(
        subprocess.run, command, env=api.env, capture_output=True, timeout=30
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def sse_ids(frames: list[dict[str, Any]]) -> list[int]:
    return [int(f["id"]) for f in frames if "id" in f]


def deltas(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [data_of(f) for f in frames if f.get("event") == "delta"]


async def test_a_cluster_of_processes_completes_every_run_once(
    temporal_server: EmbeddedServer, pg_url: str, tmp_path: Path
) -> None:
    began = time.monotonic()
    rng = random.Random(20)
    workspaces = tmp_path / "workspaces"
    workspaces.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    queue = f"cluster-{uuid.uuid4().hex[:8]}"
    shared = {
        "TEMPORAL_ADDRESS": temporal_server.address,
        "TEMPORAL_NAMESPACE": temporal_server.namespace,
        "TEMPORAL_API_KEY": "",
        "OPENFLOW_TASK_QUEUE": queue,
        "OPENFLOW_DATABASE_URL": pg_url,
    }
    script = {n: node_turns(n) for n in NODES}
    cluster = Cluster()
    workers: list[Process] = []
    for i in range(WORKERS):
        home = tmp_path / f"worker-{i + 1}"
        write_scripted_settings(home, script)
        values = {
            **shared,
            "OPENFLOW_HOME": str(home),
            "OPENFLOW_WORKSPACES": str(workspaces),
            "ANTHROPIC_API_KEY": "",
            "OPENAI_API_KEY": "",
        }
        workers.append(
            cluster.add(
                Process(
                    f"worker-{i + 1}",
                    ["worker"],
                    process_env(values, WORKER_VARIABLES),
                    logs / f"worker-{i + 1}.log",
                    ready="Worker on",
                )
            )
        )
    apis: list[tuple[Process, str]] = []
    for i in range(2):
        home = tmp_path / f"api-{i + 1}"
        home.mkdir()
        port = free_port()
        values = {**shared, "OPENFLOW_HOME": str(home), "OPENFLOW_API_KEYS": f"{API_KEY}={TENANT}"}
        api = cluster.add(
            Process(
                f"api-{i + 1}",
                ["api", "--host", "0.0.0.0", "--port", str(port)],
                process_env(values, API_VARIABLES),
                logs / f"api-{i + 1}.log",
                ready="Uvicorn running",
            )
        )
        apis.append((api, f"http://127.0.0.1:{port}"))

    auth = {"Authorization": f"Bearer {API_KEY}"}
    try:
        for process in cluster.processes:
            process.start()
        await asyncio.gather(*(p.wait_ready(180) for p in cluster.processes))
        started_at = time.monotonic() - began
        async with (
            httpx.AsyncClient(base_url=apis[0][1], headers=auth, timeout=30) as one,
            httpx.AsyncClient(base_url=apis[1][1], headers=auth, timeout=30) as two,
        ):
            assert (await one.get("/health")).json()["status"] == "ok"
            await compose_healthcheck_passes(apis[0][0], apis[0][1])
            assert (
                await two.get("/runs", headers={"Authorization": "Bearer nope"})
            ).status_code == 401

            # Run 0 is followed live; run 1 asks for an approval; all start over HTTP.
            run_ids: list[str] = []
            for i in range(RUNS):
                http = one if i % 2 else two
                body = {"workflow": workflow(approve_b=i == 1), "entrypoint": f"run {i}"}
                response = await http.post("/runs", json=body)
                assert response.status_code == 201, response.text
                run_ids.append(response.json()["run_id"])
            streamed, approval_run = run_ids[0], run_ids[1]

            # The first part of run 0's stream from one API process, the rest from the other.
            first, ended = await follow(
                one, streamed, until=lambda f: len(sse_ids([f])) == 1 and int(f["id"]) >= 4
            )
            assert not ended
            seen = sse_ids(first)
            live_seen = [d["live_seq"] for d in deltas(first)]
            resumed = asyncio.create_task(
                follow(
                    two,
                    streamed,
                    headers={"Last-Event-ID": str(seen[-1])},
                    live_after=max(live_seen, default=0),
                    timeout=240,
                )
            )

            async def kill_at_random() -> int:
                """kill -9 a random worker now and then, restarting it at once (same home)."""
                kills, restarts = 0, []
                while kills < KILLS:
                    await asyncio.sleep(rng.uniform(0.5, 1.5))
                    if len(ended_runs) == RUNS:
                        break
                    victim = rng.choice([w for w in workers if w.alive])
                    victim.kill()
                    kills += 1
                    victim.start()
                    restarts.append(asyncio.create_task(victim.wait_ready(180)))
                await asyncio.gather(*restarts)
                return kills

            ended_runs: set[str] = set()
            killer = asyncio.create_task(kill_at_random())

            async def approval() -> dict[str, Any] | None:
                items = (await two.get("/inbox")).json()
                return next(
                    (i for i in items if i["run_id"] == approval_run and i["kind"] == "approval"),
                    None,
                )

            item = await poll(approval, "run 1's approval", timeout=60)
            answered = await one.post(
                f"/runs/{approval_run}/approvals/{item['approval_id']}", json={"allow": True}
            )
            assert answered.status_code == 200, answered.text

            async def settled(run_id: str) -> str:
                async def done() -> str | None:
                    response = await (one if rng.random() < 0.5 else two).get(f"/runs/{run_id}")
                    status = response.json().get("status")
                    if status == "paused" and run_id == approval_run:
                        pending = await approval()  # a retried batch asks again
                        if pending is not None:
                            await two.post(
                                f"/runs/{run_id}/approvals/{pending['approval_id']}",
                                json={"allow": True},
                            )
                    if status in ("completed", "failed", "stopped"):
                        ended_runs.add(run_id)
                        return str(status)
                    return None

                status: str = await poll(done, f"run {run_id} to end", timeout=240, every=0.3)
                return status

            statuses = await asyncio.gather(*(settled(r) for r in run_ids))
            kills = await killer
            rest, ended = await resumed
            finished_at = time.monotonic() - began

            assert statuses == ["completed"] * RUNS, dict(zip(run_ids, statuses, strict=True))
            assert kills >= 2, "the runs ended before workers were killed"

            # The resumed stream: nothing lost, nothing repeated, and the live deltas arrived.
            assert ended
            after = sse_ids(rest)
            assert seen + after == list(range(1, len(seen) + len(after) + 1))
            page = (await two.get(f"/runs/{streamed}/events")).json()
            streamed_events = [data_of(f) for f in first + rest if "id" in f]
            # The same events under the same seqs. A timestamp may differ: a query can answer
            # from a workflow task whose worker was killed while reporting it, and the task's
            # retry records the same events later (see README, "A deployment on several
            # machines").
            untimed = [{k: v for k, v in e.items() if k != "at_ms"} for e in streamed_events]
            assert untimed == [{k: v for k, v in e.items() if k != "at_ms"} for e in page]
            retimed = sum(a != b for a, b in zip(streamed_events, page, strict=True))
            live = deltas(first) + deltas(rest)
            live_seqs = [d["live_seq"] for d in live]
            assert len(live_seqs) == len(set(live_seqs)), "a live delta came twice"
            text = "".join(d["delta"] for d in live if d.get("node_id") == "d")
            assert STREAMED in text, "the streamed reply did not reach the API's stream"

            for run_id in run_ids:
                events = (await one.get(f"/runs/{run_id}/events")).json()
                unknown = {
                    e.get("tool_call_id") for e in events if e["type"] == "ToolOutcomeUnknown"
                }
                folder = workspaces / run_id
                ledger = (folder / "ledger.txt").read_text().split()
                assert len(ledger) == len(set(ledger)), f"{run_id}: a bash call ran twice: {ledger}"
                for node_id in NODES:
                    if f"{node_id}-bash" not in unknown:
                        assert node_id in ledger, f"{run_id}: {node_id} reported done, not run"
                    if f"{node_id}-write" not in unknown:
                        written = (folder / f"{node_id}.txt").read_text()
                        assert written == f"written by {node_id}\n"
                state = (await two.get(f"/runs/{run_id}")).json()
                for node_id in NODES:
                    handoff = await (one if node_id in "ac" else two).get(
                        f"/runs/{run_id}/handoffs/{node_id}"
                    )
                    assert handoff.status_code == 200, handoff.text
                    digest = hashlib.sha256(handoff.content).hexdigest()
                    assert handoff.headers["X-OpenFlow-Sha256"] == digest
                    assert state["handoffs"][node_id]["sha256"] == digest
                    assert f"{node_id} done" in handoff.text
                spilled = [e for e in events if e["type"] == "ToolArtifactCreated"]
                if "a-spill" not in unknown:
                    assert spilled, f"{run_id}: the long bash output was not spilled"
                for event in spilled[:1]:
                    artifact = await two.get(f"/runs/{run_id}/artifacts/{event['artifact_id']}")
                    assert artifact.status_code == 200, artifact.text
                    assert "\n20000\n" in artifact.text

            approvals = (await one.get(f"/runs/{approval_run}/events")).json()
            assert any(e["type"] == "ToolApproved" for e in approvals)
    finally:
        cluster.stop()

    for i in range(WORKERS):
        home = tmp_path / f"worker-{i + 1}"
        assert files_under(home) == ["settings.json"], f"run state under {home}"
    for i in range(2):
        assert files_under(tmp_path / f"api-{i + 1}") == []
    assert sorted(p.name for p in workspaces.iterdir()) == sorted(run_ids)

    # The runs' activities were spread over the worker processes.
    client = await temporal_server.connect(data_converter=pydantic_data_converter)
    identities = set()
    for run_id in run_ids:
        async for event in client.get_workflow_handle(run_id).fetch_history_events():
            if event.HasField("activity_task_started_event_attributes"):
                identities.add(event.activity_task_started_event_attributes.identity)
    assert len(identities) >= WORKERS, identities

    for run_id in (streamed, approval_run):
        await replay_history(await client.get_workflow_handle(run_id).fetch_history())
    print(
        f"\ncluster: processes up in {started_at:.1f}s, {RUNS} runs done in "
        f"{finished_at - started_at:.1f}s with {kills} worker kills, "
        f"{len(identities)} worker processes took activities, "
        f"{retimed} streamed events retimed"
    )
