"""Helpers for CLI tests: run `openflow` in a subprocess without blocking the test's event loop."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio
from temporalio.client import Client

from openflow.client import Runs
from openflow.engine import WorkflowRunState
from openflow.testing import agent_node
from openflow.worker import build_worker

PROVIDER_KEY_VARS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")


@dataclass
class Result:
    """What one `openflow` invocation printed and returned."""

    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]

    def json(self) -> Any:
        return json.loads(self.stdout)


def cli_env(env: Mapping[str, str]) -> dict[str, str]:
    """The process environment with `env` on top and no provider keys."""
    merged = {k: v for k, v in os.environ.items() if k not in PROVIDER_KEY_VARS}
    merged.update(env)
    merged["PYTHONUNBUFFERED"] = "1"
    return merged


async def openflow(env: Mapping[str, str], *args: str, timeout: float = 60.0) -> Result:
    """Run `python -m openflow.cli ARGS` with stdin closed (not a terminal)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "openflow.cli",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=cli_env(env),
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return Result(process.returncode, out.decode(), err.decode())


def assert_one_line_error(result: Result, *expected: str) -> None:
    """Exit 2, one line on stderr containing each of `expected`, nothing on stdout, no traceback."""
    assert result.code == 2, (result.code, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    for text in expected:
        assert text in lines[0], lines[0]


def write_workflow(folder: Path, workflow: dict[str, Any]) -> Path:
    """Write a workflow file and return its path."""
    path = folder / f"{workflow['id']}.workflow.json"
    path.write_text(json.dumps(workflow))
    return path


node = agent_node


def workflow(workflow_id: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    """A workflow of `nodes` in a chain."""
    ids = [n["id"] for n in nodes]
    edges = [{"id": f"{a}-{b}", "from": a, "to": b} for a, b in zip(ids, ids[1:], strict=False)]
    return {"id": workflow_id, "name": workflow_id.title(), "nodes": list(nodes), "edges": edges}


async def wait_state(
    runs: Runs,
    run_id: str,
    predicate: Callable[[WorkflowRunState], object],
    timeout: float = 30.0,
) -> WorkflowRunState:
    """Poll the run's state until `predicate` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: WorkflowRunState | None = None
    while loop.time() < deadline:
        try:
            last = await runs.state(run_id)
        except Exception:  # noqa: BLE001 - the run may not have taken its first task yet
            last = None
        if last is not None and predicate(last):
            return last
        await asyncio.sleep(0.05)
    shown = json.dumps(last.as_json())[:1500] if last is not None else "none answered"
    raise AssertionError(f"condition not reached; last state: {shown}")


@pytest_asyncio.fixture(loop_scope="session")
async def runs(client: Client, task_queue: str, openflow_home: Path) -> AsyncIterator[Runs]:
    """A worker on this test's queue, and the runs on it."""
    async with build_worker(client, task_queue, openflow_home):
        yield Runs(client, task_queue)
