"""Runs one tool batch: context, locks, budget, result cache, staging, events.

`BatchDeps` is what every batch on a worker shares (built once, in `openflow.worker`); the
`tool_batch` activity and a model turn's eager reads both run batches through `run_tools`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from openflow import contracts as c
from openflow.activities.run_files import RunFiles, require_folder
from openflow.engine.request import ToolSpec
from openflow.engine.transcript import ToolResult, ToolResultItem, TranscriptItem
from openflow.live import LiveChannel
from openflow.settings import runtime_settings

if TYPE_CHECKING:
    from openflow.activities.tools.cache import ResultCache
    from openflow.activities.tools.cluster_locks import ClusterLocks
    from openflow.activities.tools.executor import Locks
    from openflow.activities.tools.registry import ToolRegistry
    from openflow.activities.tools.staging import RunStaging

#: Variables a tool process may see; everything else in the worker's environment stays out.
TOOL_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ", "USER", "SHELL")
PREVIEW_LIMIT = 2_000
MCP_PACKAGE = "openflow.activities.mcp"
ITEMS: TypeAdapter[list[TranscriptItem]] = TypeAdapter(list[TranscriptItem])


def preview(text: str, limit: int = PREVIEW_LIMIT) -> str:
    """The part of a tool result history keeps; the run store keeps the whole."""
    if len(text) <= limit:
        return text
    head = text[: limit - 200]
    return f"{head}\n… [{len(text) - len(head)} more characters in the run store]"


def tool_budget(env: Mapping[str, str]) -> int:
    """How many tool calls may run at once on this worker (OPENFLOW_TOOL_BUDGET, default 16)."""
    return runtime_settings(env, only=("tool_budget",)).tool_budget


def default_tools() -> ToolRegistry:
    """The built-in tool registry."""
    from openflow.activities.tools.registry import default_registry

    return default_registry()


def tool_specs(tools: ToolRegistry | None) -> dict[str, ToolSpec]:
    """The worker's built-in tools as a node in execution sees them, by name."""
    if tools is None:
        return {}
    return {spec.name: spec for spec in tools.specs("execution")}


def allowed_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment tools run with: a short allow-list, never a provider key."""
    return {k: env[k] for k in TOOL_ENV_KEYS if k in env}


@dataclass
class BatchDeps:
    """What every tool batch on a worker shares: the run files, the tools, the live channel,
    the budget of concurrent calls, the cluster's locks (with a database) and, per run, its
    lock table and result cache."""

    files: RunFiles
    tools: ToolRegistry | None
    live: LiveChannel | None
    budget: asyncio.Semaphore
    cluster_locks: ClusterLocks | None = None
    _staging: RunStaging | None = field(default=None, repr=False)
    _locks: dict[str, Locks] = field(default_factory=dict, repr=False)
    _caches: dict[str, ResultCache] = field(default_factory=dict, repr=False)

    def staging(self) -> RunStaging:
        """Local copies of run files for tools, when the store is not on this disk."""
        if self._staging is None:
            from openflow.activities.tools.staging import RunStaging

            self._staging = RunStaging()
        return self._staging

    def locks(self, run_id: str, execution_dir: Path) -> Locks:
        """The run's lock table (shared with every worker when there is a database)."""
        locks: Locks | None = self._locks.get(run_id)
        if locks is None:
            if self.cluster_locks is None:
                from openflow.activities.tools.executor import LockTable

                locks = LockTable()
            else:
                from openflow.activities.tools.cluster_locks import SharedLockTable

                locks = SharedLockTable(self.cluster_locks, run_id, execution_dir)
            locks = self._locks.setdefault(run_id, locks)
        return locks

    def cache(self, run_id: str) -> ResultCache:
        """The run's cache of read results."""
        cache = self._caches.get(run_id)
        if cache is None:
            from openflow.activities.tools.cache import ResultCache

            cache = self._caches.setdefault(run_id, ResultCache())
        return cache


@dataclass
class BatchRun:
    results: list[ToolResult]
    interrupted: bool = False
    changed_files: list[dict[str, Any]] = field(default_factory=list)
    reads: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    durations_ms: list[int] = field(default_factory=list)


async def run_tools(
    deps: BatchDeps, inp: c.ToolBatchInput
) -> tuple[c.ToolBatchResult, list[TranscriptItem]]:
    """Run one batch: its result for history and its full result items."""
    if not inp.execution_dir:
        files = deps.files
        folder = (
            await asyncio.to_thread(files.execution_dir, inp.run_id)
            if files.remote()
            else files.execution_dir(inp.run_id)
        )
        inp = inp.model_copy(update={"execution_dir": folder})
    outcome = await run_batch(deps, inp)
    full: list[TranscriptItem] = [ToolResultItem(result=r) for r in outcome.results]
    result = c.ToolBatchResult(
        results=[
            c.ToolResultWire(
                tool_call_id=r.tool_call_id,
                tool_name=r.tool_name,
                content=preview(r.content),
                is_error=r.is_error,
                artifact_ids=r.artifact_ids,
                output_meta=r.output_meta,
            )
            for r in outcome.results
        ],
        interrupted=outcome.interrupted,
        changed_files=outcome.changed_files,
        reads=outcome.reads,
        events=outcome.events,
        ms=outcome.durations_ms,
    )
    return result, full


async def run_batch(deps: BatchDeps, inp: c.ToolBatchInput) -> BatchRun:
    """Execute a batch with the worker's shared locks, budget and the run's result cache."""
    from openflow.activities.tools.base import ToolContext
    from openflow.activities.tools.executor import execute_batch

    store = deps.files.store
    execution_dir = Path(inp.execution_dir)
    require_folder(execution_dir)
    run_dir = store.run_dir(inp.run_id)
    staging, staged = None, {}
    if run_dir is None:
        # The store is not on this disk: tools work on a local copy of the run's files.
        staging = deps.staging()
        if reads_run_files(inp.calls):
            staged = await asyncio.to_thread(staging.pull, store, inp.run_id)
        else:
            staged = staging.local(inp.run_id)  # a scan of a small local folder
        run_dir = staging.folder(inp.run_id)
    events: list[dict[str, Any]] = []
    cancel = asyncio.Event()
    live = deps.live

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
        env=allowed_env(os.environ),
        home=deps.files.home,
    )
    if _calls_mcp(inp):
        # Importing the MCP SDK takes seconds on a busy machine: off the event loop, so the
        # batch's heartbeat goes on.
        await asyncio.to_thread(importlib.import_module, MCP_PACKAGE)
    locks = deps.locks(inp.run_id, execution_dir)
    cache = deps.cache(inp.run_id)
    async with _batch_tools(deps, inp) as registry:
        work = asyncio.create_task(
            execute_batch(ctx, inp.calls, registry, locks, deps.budget, cache)
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
                    await asyncio.to_thread(staging.push, store, inp.run_id, changed)
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
    deps: BatchDeps, inp: c.ToolBatchInput
) -> contextlib.AbstractAsyncContextManager[Any]:
    """The worker's tools, plus the run's pinned MCP tools when the batch calls one."""
    if not _calls_mcp(inp):
        return contextlib.nullcontext(deps.tools)
    from openflow.activities.mcp import batch_registry

    store = deps.files.store
    return batch_registry(
        deps.tools,
        store,
        inp.run_id,
        home=deps.files.home,
        execution_dir=Path(inp.execution_dir),
        run_dir=store.run_dir(inp.run_id),
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


__all__ = [
    "ITEMS",
    "BatchDeps",
    "BatchRun",
    "allowed_env",
    "default_tools",
    "preview",
    "run_batch",
    "run_tools",
    "tool_budget",
    "tool_specs",
]
