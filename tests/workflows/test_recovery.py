"""Recovery: a killed worker is replaced within seconds, and a server blip loses no known outcome."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from openflow.client import Runs
from openflow.contracts import RunResult
from openflow.engine.events import Error
from openflow.server import EmbeddedServer, free_port
from openflow.testing import write_scripted_settings
from openflow.worker import build_worker
from openflow.workflows.calls import HEARTBEAT_TIMEOUT
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")
ROOT = Path(__file__).resolve().parents[2]
SLOW_MCP = Path(__file__).with_name("slow_mcp_server.py")


async def _poll(predicate: Any, timeout: float = 30.0, what: str = "condition") -> float:
    """Wait until `predicate()` holds; return when it did (the loop's clock)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if predicate():
            return loop.time()
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what} not reached within {timeout}s")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def _spawn_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workflows.worker_main"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert b"worker ready" in line, line
    return proc


async def test_a_worker_killed_in_prepare_with_an_mcp_server_is_replaced_within_seconds(
    client: Client, task_queue: str, openflow_home: Path, openflow_env: dict[str, str]
) -> None:
    first, later = openflow_home / "mcp-first.pid", openflow_home / "mcp-later.pid"
    write_scripted_settings(openflow_home, {"a": [{"submit": {"summary": "prepared"}}]})
    settings = json.loads((openflow_home / "settings.json").read_text())
    settings["mcp"] = {
        "servers": {
            "slow": {
                "command": sys.executable,
                "args": [str(SLOW_MCP)],
                "env": {"SLOW_MCP_FIRST": str(first), "SLOW_MCP_LATER": str(later)},
            }
        }
    }
    (openflow_home / "settings.json").write_text(json.dumps(settings))
    workers = [_spawn_worker(openflow_env), _spawn_worker(openflow_env)]
    try:
        runs = Runs(client, task_queue)
        run_id = await runs.start(make_workflow([node("a")], []), entrypoint="go")
        await _poll(lambda: first.exists() and first.read_text().strip(), what="the first start")
        server_pid = int(first.read_text())
        launcher = _parent(server_pid)
        owner = next(w for w in workers if w.pid == _parent(launcher))
        loop = asyncio.get_running_loop()
        killed = loop.time()
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        gone = await _poll(
            lambda: not _alive(server_pid) and not _alive(launcher), 10, "the MCP server's end"
        )
        taken = await _poll(lambda: later.exists(), 20, "another worker taking over")
        raw = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 30)
        done = loop.time()
        assert RunResult.model_validate(raw).status == "completed"
        print(
            f"\nkill during prepare_run: MCP server gone after {gone - killed:.2f}s, "
            f"prepare taken over after {taken - killed:.2f}s, run completed after "
            f"{done - killed:.2f}s"
        )
        assert gone - killed < 2, "the killed worker's MCP server outlived it"
        assert taken - killed < 8, "no other worker took the run over within seconds"
        # No start left the server out (a skipped server shows as an `ignored ...` error event).
        events = await runs.events(run_id)
        assert not any(isinstance(e, Error) and "slow" in e.message for e in events)
        await Harness(client, task_queue, openflow_home).replay(run_id)
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


async def test_a_server_killed_while_writes_run_settles_each_with_its_real_result(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    ledger = home / "ledger.txt"
    names = ["w1", "w2", "w3", "w4"]
    script = {
        n: [
            {
                "tools": [
                    {
                        "name": "bash",
                        "args": {"command": f"echo {n} >> {ledger}; sleep 1; echo {n}-done"},
                        "id": f"call-{n}",
                    }
                ]
            },
            {"submit": {"summary": n}},
        ]
        for n in names
    }
    write_scripted_settings(home, script)
    server = EmbeddedServer(home, address=f"127.0.0.1:{free_port()}", ui=False)
    await server.start()
    try:
        client = await server.connect(data_converter=pydantic_data_converter)
        runs = Runs(client, "blip-queue")
        wf = make_workflow([node(n, tools={"approvalMode": "yolo"}) for n in names], [])
        async with build_worker(client, "blip-queue", home):
            run_id = await runs.start(wf, entrypoint="go", project_dir=str(home))
            await _poll(
                lambda: ledger.exists() and len(ledger.read_text().split()) == len(names),
                what="every write running",
            )
            server.kill()
            receipts = home / "runs" / run_id / "receipts"
            await _poll(
                lambda: receipts.is_dir() and len(list(receipts.iterdir())) == len(names),
                what="every batch's receipt",
            )
            # A blip longer than the heartbeat timeout: the server then times the batches out.
            await asyncio.sleep(HEARTBEAT_TIMEOUT.total_seconds() + 1)
            loop = asyncio.get_running_loop()
            restarted = loop.time()
            await server.start()
            raw = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
            settled = loop.time()
            assert RunResult.model_validate(raw).status == "completed"
            assert sorted(ledger.read_text().split()) == names, "a write ran twice or not at all"
            events = await runs.events(run_id)
            assert not [e for e in events if e.type == "ToolOutcomeUnknown"]
            for n in names:
                (done,) = [
                    e for e in events if e.type == "ToolCompleted" and e.tool_call_id == f"call-{n}"
                ]
                assert f"{n}-done" in done.content and not done.is_error
            history = await client.get_workflow_handle(run_id).fetch_history()
            lookups = sum(
                1
                for e in history.events
                if e.HasField("activity_task_scheduled_event_attributes")
                and e.activity_task_scheduled_event_attributes.activity_type.name == "read_receipt"
            )
            print(
                f"\nserver blip: {lookups} of {len(names)} batches settled from their receipts; "
                f"run completed {settled - restarted:.2f}s after the server came back"
            )
            assert lookups >= 1, "no completion was lost: the test did not exercise receipts"
            await Harness(client, "blip-queue", home).replay(run_id)
    finally:
        await server.stop()
