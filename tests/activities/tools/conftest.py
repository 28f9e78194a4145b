"""Fixtures for tool tests: an execution folder, a run folder, and a batch runner that records events."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from openflow.activities.tools import (
    BatchOutcome,
    LockTable,
    ResultCache,
    ToolContext,
    ToolRegistry,
    default_registry,
    execute_batch,
    new_tool_budget,
)
from openflow.engine.transcript import ToolCall


@dataclass
class Harness:
    """One run's tool plumbing: folders, shared locks/budget/cache, recorded events."""

    workdir: Path
    run_dir: Path
    registry: ToolRegistry = field(default_factory=default_registry)
    locks: LockTable = field(default_factory=LockTable)
    budget: asyncio.Semaphore = field(default_factory=new_tool_budget)
    cache: ResultCache | None = field(default_factory=ResultCache)
    events: list[dict[str, Any]] = field(default_factory=list)
    live: list[dict[str, Any]] = field(default_factory=list)

    def ctx(self, node_id: str = "node", **overrides: Any) -> ToolContext:
        """A context for `node_id`; tool retries are off unless a test asks for them."""
        values: dict[str, Any] = {
            "run_id": "run-test",
            "node_id": node_id,
            "execution_dir": self.workdir,
            "run_dir": self.run_dir,
            "retry_policy": (0, 0),
            "emit": self.events.append,
            "live": self.live.append,
            "env": {},
        }
        values.update(overrides)
        return ToolContext(**values)

    async def run(
        self, *calls: ToolCall | tuple[str, dict[str, Any]], ctx: ToolContext | None = None
    ) -> BatchOutcome:
        """Execute calls (ToolCall or (name, args) pairs, ids `c1`, `c2`, ...) as one batch."""
        built = [
            c if isinstance(c, ToolCall) else ToolCall(id=f"c{i}", name=c[0], arguments=c[1])
            for i, c in enumerate(calls, start=1)
        ]
        return await execute_batch(
            ctx or self.ctx(), built, self.registry, self.locks, self.budget, self.cache
        )

    async def one(self, name: str, args: dict[str, Any], **ctx_overrides: Any) -> Any:
        """Execute a single call and return its ToolResult."""
        ctx = self.ctx(**ctx_overrides) if ctx_overrides else None
        outcome = await self.run((name, args), ctx=ctx)
        return outcome.results[0]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        """Recorded durable events of one type."""
        return [e for e in self.events if e["type"] == kind]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    workdir = tmp_path / "work"
    workdir.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return Harness(workdir=workdir, run_dir=run_dir)


def _pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # the process vanished while we looked
        return False
    return state not in ("Z", "X")


def _command_pid_alive(folder: Path, pid: int) -> bool:
    """Whether a process a tool command started, known by the pid the command saw, still lives.

    A confined command has its own PID namespace, so `$!` there is not the host's pid: look
    for a live process whose innermost pid (`NSpid`) is `pid` and whose working folder is in
    the execution folder. Unconfined, the innermost pid is the host pid.
    """
    root = os.path.realpath(folder)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
            inner = int(fields.get("NSpid", entry).split()[-1])
            if inner != pid:
                continue
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except (OSError, ValueError):  # gone while we looked, or not ours to see
            continue
        if (cwd == root or cwd.startswith(root + os.sep)) and _pid_alive(int(entry)):
            return True
    return False


async def _wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `check` until it holds, failing the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.02)


@pytest.fixture
def pid_alive(harness: Harness) -> Callable[[int], bool]:
    """Whether a process a command started in the harness folder (by its `$!`) is alive."""
    return lambda pid: _command_pid_alive(harness.workdir, pid)


@pytest.fixture
def command_pid_alive() -> Callable[[Path, int], bool]:
    """Whether a process a command started in a given folder (by its `$!`) is alive."""
    return _command_pid_alive


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    """Poll a condition with a deadline (never sleep for a fixed time to wait for state)."""
    return _wait_until
