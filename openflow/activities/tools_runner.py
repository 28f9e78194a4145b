"""Runs one tool batch for the `tool_batch` activity: context, locks, budget, cache, events."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openflow import contracts as c
from openflow.engine.transcript import ToolResult

if TYPE_CHECKING:
    from openflow.activities.run_activities import RunActivities

#: Variables a tool process may see; everything else in the worker's environment stays out.
TOOL_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ", "USER", "SHELL")


@dataclass
class BatchRun:
    results: list[ToolResult]
    interrupted: bool = False
    changed_files: list[dict[str, Any]] = field(default_factory=list)
    reads: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    durations_ms: list[int] = field(default_factory=list)


def default_tools() -> Any:
    """The built-in tool registry."""
    from openflow.activities.tools.registry import default_registry

    return default_registry()


def tool_env(env: dict[str, str]) -> dict[str, str]:
    """The environment tools run with: a short allow-list, never a provider key."""
    return {k: env[k] for k in TOOL_ENV_KEYS if k in env}


async def run_batch(acts: RunActivities, inp: c.ToolBatchInput) -> BatchRun:
    """Execute a batch with the worker's shared locks, budget and the run's result cache."""
    from openflow.activities.run_activities import require_folder
    from openflow.activities.tools.base import ToolContext
    from openflow.activities.tools.cache import ResultCache
    from openflow.activities.tools.executor import LockTable, execute_batch

    execution_dir = Path(inp.execution_dir)
    require_folder(execution_dir)
    run_dir = acts.store.run_dir(inp.run_id)
    staging, staged = None, {}
    if run_dir is None:
        # The store is not on this disk: tools work on a local copy of the run's files.
        staging = acts.staging()
        if reads_run_files(inp.calls):
            staged = await asyncio.to_thread(staging.pull, acts.store, inp.run_id)
        else:
            staged = staging.local(inp.run_id)  # a scan of a small local folder
        run_dir = staging.folder(inp.run_id)
    events: list[dict[str, Any]] = []
    cancel = asyncio.Event()
    live = acts.live

    def publish(event: dict[str, Any]) -> None:
        if live is not None:
            live.publish(inp.run_id, event)

    ctx = ToolContext(
        run_id=inp.run_id,
        node_id=inp.node_id,
        execution_dir=execution_dir,
        run_dir=run_dir,
        retry_policy=(inp.max_attempts, inp.backoff_ms),
        emit=events.append,
        live=publish,
        cancel=cancel,
        env=tool_env(dict(os.environ)),
        home=acts.home,
    )
    if _calls_mcp(inp):
        # Importing the MCP SDK takes seconds on a busy machine: off the event loop, so the
        # batch's heartbeat goes on.
        await asyncio.to_thread(importlib.import_module, "openflow.activities.mcp")
    locks = acts._locks.get(inp.run_id)
    if locks is None:
        cluster = acts.cluster_locks()
        if cluster is None:
            locks = LockTable()
        else:
            from openflow.activities.tools.cluster_locks import SharedLockTable

            locks = SharedLockTable(cluster, inp.run_id, execution_dir)
        locks = acts._locks.setdefault(inp.run_id, locks)
    cache = acts._caches.setdefault(inp.run_id, ResultCache())
    async with _batch_tools(acts, inp) as registry:
        work = asyncio.create_task(
            execute_batch(ctx, inp.calls, registry, locks, acts._budget, cache)
        )
        try:
            outcome = await asyncio.shield(work)
        except asyncio.CancelledError:
            cancel.set()
            with contextlib.suppress(Exception):
                await work
            raise
        finally:
            if staging is not None:
                changed = staging.changed(inp.run_id, staged)
                if changed:
                    await asyncio.to_thread(staging.push, acts.store, inp.run_id, changed)
    return BatchRun(
        results=list(outcome.results),
        interrupted=bool(outcome.interrupted),
        changed_files=[_plain(r) for r in getattr(outcome, "changed_files", [])],
        reads=[_plain(r) for r in getattr(outcome, "reads", [])],
        events=events,
        durations_ms=list(outcome.durations_ms),
    )


def _calls_mcp(inp: c.ToolBatchInput) -> bool:
    return any(call.name.startswith(("mcp_", "mcp/")) for call in inp.calls)


def reads_run_files(calls: Any) -> bool:
    """Whether a batch may read the run's own files (a handoff, an artifact, the plan draft):
    only then are they copied in from a remote store first."""
    from openflow.engine.policy import SEAL_TOOL

    for call in calls:
        if call.name == SEAL_TOOL or "plan" in call.name:
            return True
        text = json.dumps(call.arguments, default=str)
        if "run://" in text or "artifact" in text:
            return True
    return False


def _batch_tools(
    acts: RunActivities, inp: c.ToolBatchInput
) -> contextlib.AbstractAsyncContextManager[Any]:
    """The worker's tools, plus the run's pinned MCP tools when the batch calls one."""
    if not _calls_mcp(inp):
        return contextlib.nullcontext(acts.tools)
    from openflow.activities.mcp import batch_registry

    return batch_registry(
        acts.tools,
        acts.store,
        inp.run_id,
        home=acts.home,
        execution_dir=Path(inp.execution_dir),
        run_dir=acts.store.run_dir(inp.run_id),
    )


def _plain(record: Any) -> dict[str, Any]:
    if isinstance(record, dict):
        return record
    if hasattr(record, "model_dump"):
        return dict(record.model_dump(mode="json"))
    from dataclasses import asdict, is_dataclass

    if is_dataclass(record) and not isinstance(record, type):
        return asdict(record)
    return dict(vars(record))


__all__ = ["BatchRun", "default_tools", "run_batch", "tool_env"]
