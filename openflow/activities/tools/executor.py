"""Runs one tool batch: order, parallelism, locks, budget, retries, cancel, spill, cache (spec 4.5).

Adjacent shared tools run together; everything else runs one at a time in call order. Each
executable call takes its run-wide exclusive locks (sorted, so two batches never deadlock) and
then one permit of the process-wide budget. Every call gets exactly one result, cancelled ones
included.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from openflow.activities.spans import count_retry, elapsed_ms, record_tool, tool_span
from openflow.activities.tools.base import (
    Cancelled,
    Failed,
    FileChange,
    ReadRecord,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    intent_free,
)
from openflow.activities.tools.cache import ResultCache
from openflow.activities.tools.files import atomic_write
from openflow.activities.tools.registry import ToolRegistry
from openflow.activities.tools.spill import spill_if_large
from openflow.database import DatabaseUnavailable
from openflow.engine.events import (
    EditBatch,
    EditBatchRecorded,
    FileChanged,
    FileChangeRecord,
    FileSnapshot,
    PhaseTimed,
    ToolArtifactCreated,
    ToolRetrying,
)
from openflow.engine.protocol import backoff_delay_ms, jitter_ms
from openflow.engine.transcript import ToolCall, ToolResult

logger = logging.getLogger(__name__)

DEFAULT_TOOL_BUDGET = 16
LOCK_WAIT_REPORT_S = 0.1
INLINE_SNAPSHOT_BYTES = 8 * 1024

T = TypeVar("T")
RunEvent = EditBatchRecorded | FileChanged | PhaseTimed | ToolArtifactCreated | ToolRetrying


class BatchOutcome(BaseModel):
    """What a batch produced: one result per call in call order, plus its file effects."""

    model_config = ConfigDict(frozen=True)

    results: list[ToolResult]
    interrupted: bool = False
    changed_files: list[dict[str, Any]] = Field(default_factory=list)
    reads: list[dict[str, str]] = Field(default_factory=list)
    #: How long each call took, in milliseconds, in call order.
    durations_ms: list[int] = Field(default_factory=list)


class Locks(Protocol):
    """What a batch holds its calls' lock keys with: a `LockTable`, or one shared with the
    cluster (`cluster_locks.SharedLockTable`)."""

    def is_locked(self, key: str) -> bool: ...

    def hold(self, keys: Sequence[str]) -> contextlib.AbstractAsyncContextManager[None]: ...


class LockTable:
    """Run-wide exclusive locks by key (`path:…`, `file-mutation`, `{node}\\x1ftool:bash`)."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def is_locked(self, key: str) -> bool:
        """Whether some call holds `key` right now."""
        lock = self._locks.get(key)
        return lock is not None and lock.locked()

    @contextlib.asynccontextmanager
    async def hold(self, keys: Sequence[str]) -> AsyncIterator[None]:
        """Acquire every key in sorted order; release all on exit (also on cancellation)."""
        acquired: list[asyncio.Lock] = []
        try:
            for key in sorted(set(keys)):
                lock = self._lock(key)
                await lock.acquire()
                acquired.append(lock)
            yield
        finally:
            for lock in reversed(acquired):
                lock.release()


def new_tool_budget(limit: int = DEFAULT_TOOL_BUDGET) -> asyncio.Semaphore:
    """The process-wide budget of concurrently running tool calls (16 by default)."""
    return asyncio.Semaphore(limit)


def tool_backoff_ms(backoff_ms: int, attempt: int, node_id: str) -> int:
    """Spec 5.3: min(backoff * 2^(attempt-1), 30 s) plus a per-node jitter of 100-499 ms."""
    return backoff_delay_ms(backoff_ms, attempt) + jitter_ms(node_id)


def unavailable_result(call: ToolCall) -> ToolResult:
    """The result for a call whose tool is not registered."""
    return ToolResult(
        tool_call_id=call.id,
        tool_name=call.name,
        content=f"Tool unavailable: tool {call.name} is not registered",
        is_error=True,
    )


def cancelled_result(call: ToolCall) -> ToolResult:
    """The result for a call the batch did not finish because it was cancelled."""
    return ToolResult(
        tool_call_id=call.id,
        tool_name=call.name,
        content=Cancelled(call.name).render(),
        is_error=True,
    )


@dataclass
class _CallOutcome:
    result: ToolResult
    changed: list[dict[str, Any]] = field(default_factory=list)
    reads: list[ReadRecord] = field(default_factory=list)
    cancelled: bool = False
    ms: int | None = None


def _groups(calls: Sequence[ToolCall], registry: ToolRegistry) -> list[list[int]]:
    """Maximal runs of adjacent shared tools, every other call alone, in call order."""
    groups: list[list[int]] = []
    shared_run: list[int] = []
    for index, call in enumerate(calls):
        tool = registry.get(call.name)
        if tool is not None and tool.concurrency == "shared":
            shared_run.append(index)
            continue
        if shared_run:
            groups.append(shared_run)
            shared_run = []
        groups.append([index])
    if shared_run:
        groups.append(shared_run)
    return groups


async def _until_cancelled(ctx: ToolContext, tool: str, work: Awaitable[T]) -> T:
    """Await `work`, or cancel it (letting it clean up) as soon as the batch is cancelled."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(ctx.cancel.wait())
    try:
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        stopper.cancel()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise
    stopper.cancel()
    if task in done:
        return task.result()
    task.cancel()
    try:
        return await task  # a file mutation already under way finishes and reports
    except (asyncio.CancelledError, ToolError):
        raise Cancelled(tool) from None


async def _attempts(
    ctx: ToolContext, call: ToolCall, tool: Tool, args: dict[str, Any]
) -> ToolOutput:
    """Run the tool, retrying retryable errors with the spec 5.3 backoff (emits ToolRetrying)."""
    max_retries, backoff_ms = ctx.retry_policy
    attempt = 0
    while True:
        try:
            return await tool.run(ctx, call, args)
        except ToolError as error:
            if not error.is_retryable() or attempt >= max_retries or ctx.cancel.is_set():
                raise
            attempt += 1
            delay = tool_backoff_ms(backoff_ms, attempt, ctx.node_id)
            count_retry("tool")
            _emit(
                ctx,
                ToolRetrying(
                    node_id=ctx.node_id,
                    tool_call_id=call.id,
                    tool_name=call.name,
                    attempt=attempt + 1,
                    backoff_ms=delay,
                ),
            )
            await asyncio.sleep(delay / 1000)
        except OSError as error:
            where = f" on {error.filename!r}" if error.filename else ""
            raise Failed(f"{call.name}: {error.strerror or error}{where}") from error


def _emit(ctx: ToolContext, event: RunEvent) -> None:
    """Send a durable run event as a dict; the workflow assigns `seq` and `at_ms`."""
    ctx.emit(event.model_dump(mode="json", exclude={"seq", "at_ms"}, exclude_none=True))


def _snapshot(ctx: ToolContext, change: FileChange) -> FileSnapshot:
    """Store a before-snapshot under `snapshots/{sha256}`; inline it when it is small text."""
    before = change.before.content
    after = {
        "after_known": True,
        "after_sha256": change.after_sha256,
        "rename_to": change.rename_to,
    }
    if before is None:
        return FileSnapshot(path=change.path, existed=False, **after)
    digest = hashlib.sha256(before).hexdigest()
    store = ctx.run_dir / "snapshots" / digest
    if not store.exists():
        atomic_write(store, before)
    inline: str | None = None
    if len(before) <= INLINE_SNAPSHOT_BYTES:
        try:
            inline = before.decode("utf-8")
        except UnicodeDecodeError:
            inline = None
    return FileSnapshot(path=change.path, existed=True, content=inline, sha256=digest, **after)


def _persist_batch(
    ctx: ToolContext, call: ToolCall, changes: list[FileChange]
) -> list[dict[str, Any]]:
    """Store before-snapshots, emit EditBatchRecorded then FileChanged; return the records."""
    batch_id = uuid.uuid4().hex
    now_ms = int(time.time() * 1000)
    batch = EditBatch(
        batch_id=batch_id,
        node_id=ctx.node_id,
        tool_call_id=call.id,
        tool_name=call.name,
        timestamp_ms=now_ms,
        snapshots=tuple(_snapshot(ctx, change) for change in changes),
    )
    _emit(ctx, EditBatchRecorded(node_id=ctx.node_id, batch=batch))
    records = []
    for change in changes:
        record = FileChangeRecord(
            path=change.path,
            op=change.op,
            rename_to=change.rename_to,
            diff_summary=change.diff_summary,
            timestamp_ms=now_ms,
            batch_id=batch_id,
        )
        _emit(ctx, FileChanged(node_id=ctx.node_id, record=record))
        records.append(record.model_dump(mode="json", exclude_none=True))
    return records


def _finish(ctx: ToolContext, call: ToolCall, output: ToolOutput) -> _CallOutcome:
    """Spill large output, emit artifact and file events, build the ToolResult."""
    meta = dict(output.output_meta) if output.output_meta else None
    artifact_ids = tuple(output.artifact_ids)
    content = output.content
    spilled = spill_if_large(ctx.artifacts_dir, call.name, content)
    if spilled is not None:
        content = spilled.content
        artifact_ids += (spilled.artifact_id,)
        meta = {**(meta or {}), "truncation": spilled.truncation}
        _emit(
            ctx,
            ToolArtifactCreated(
                node_id=ctx.node_id,
                artifact_id=spilled.artifact_id,
                tool_name=call.name,
                path=str(spilled.path),
                size_bytes=spilled.size_bytes,
            ),
        )
    changed = _persist_batch(ctx, call, output.changes) if output.changes else []
    result = ToolResult(
        tool_call_id=call.id,
        tool_name=call.name,
        content=content,
        is_error=output.is_error,
        artifact_ids=artifact_ids,
        output_meta=meta,
    )
    output.content, output.artifact_ids, output.output_meta = content, artifact_ids, meta
    return _CallOutcome(result=result, changed=changed, reads=list(output.reads))


async def _run_call(
    ctx: ToolContext,
    call: ToolCall,
    registry: ToolRegistry,
    locks: Locks,
    budget: asyncio.Semaphore,
    cache: ResultCache | None,
) -> _CallOutcome:
    """Run one call in its span, timed."""
    tool = registry.get(call.name)
    tier = str(tool.tier) if tool is not None else "unavailable"
    started = time.monotonic()
    with tool_span(ctx.node_id, call.id, call.name, tier) as span:
        outcome = await _run_one(ctx, call, registry, locks, budget, cache)
        outcome.ms = elapsed_ms(started)
        if outcome.cancelled:
            result = "cancelled"
        elif tool is None:
            result = "unavailable"
        else:
            result = "error" if outcome.result.is_error else "ok"
        record_tool(span, call.name, result, outcome.ms)
    return outcome


async def _run_one(
    ctx: ToolContext,
    call: ToolCall,
    registry: ToolRegistry,
    locks: Locks,
    budget: asyncio.Semaphore,
    cache: ResultCache | None,
) -> _CallOutcome:
    tool = registry.get(call.name)
    if tool is None:
        return _CallOutcome(result=unavailable_result(call))
    if ctx.cancel.is_set():
        return _CallOutcome(result=cancelled_result(call), cancelled=True)
    args = dict(call.arguments)
    try:
        tool.validate(args)
    except ToolError as error:
        return _finish(ctx, call, ToolOutput(content=error.render(), is_error=True))
    args = intent_free(args)

    if cache is not None:
        hit = cache.lookup(call.name, args, ctx.conversation, call.id)
        if hit is not None:
            return _CallOutcome(
                result=ToolResult(
                    tool_call_id=call.id,
                    tool_name=call.name,
                    content=hit.content,
                    artifact_ids=hit.artifact_ids,
                    output_meta=hit.output_meta,
                ),
                reads=hit.reads,
            )

    async def locked_run() -> ToolOutput:
        started = time.monotonic()
        async with locks.hold(tool.lock_keys(ctx, args)):
            waited = time.monotonic() - started
            if waited >= LOCK_WAIT_REPORT_S:
                _emit(
                    ctx,
                    PhaseTimed(
                        phase="tool-wait",
                        label=call.name,
                        node_id=ctx.node_id,
                        duration_ms=int(waited * 1000),
                    ),
                )
            async with budget:
                return await _attempts(ctx, call, tool, args)

    cancelled = False
    try:
        output = await _until_cancelled(ctx, call.name, locked_run())
    except ToolError as error:
        cancelled = isinstance(error, Cancelled)
        output = ToolOutput(content=error.render(), is_error=True)
    except DatabaseUnavailable:
        raise  # the batch fails retryably; it is no tool's result
    except Exception:  # a tool bug must not lose the other results of the batch
        logger.exception("tool %s crashed on call %s", call.name, call.id)
        output = ToolOutput(
            content=f"[failed] {call.name} stopped on an internal error — try another approach "
            "or report it; the details are in the worker log",
            is_error=True,
        )
    finally:
        if tool.mutates and cache is not None:
            cache.bump()
    outcome = _finish(ctx, call, output)
    outcome.cancelled = cancelled
    if cache is not None and not cancelled:
        cache.store(call.name, args, ctx.conversation, call.id, output)
    return outcome


async def execute_batch(
    ctx: ToolContext,
    calls: Sequence[ToolCall],
    registry: ToolRegistry,
    locks: Locks,
    budget: asyncio.Semaphore,
    cache: ResultCache | None = None,
) -> BatchOutcome:
    """Execute a tool batch and return one result per call, in call order."""
    outcomes: list[_CallOutcome | None] = [None] * len(calls)
    for group in _groups(calls, registry):
        if ctx.cancel.is_set():
            break
        finished = await asyncio.gather(
            *(_run_call(ctx, calls[i], registry, locks, budget, cache) for i in group)
        )
        for index, outcome in zip(group, finished, strict=True):
            outcomes[index] = outcome

    results: list[ToolResult] = []
    changed: list[dict[str, Any]] = []
    reads: dict[str, dict[str, str]] = {}
    interrupted = False
    durations: list[int] = []
    for call, maybe in zip(calls, outcomes, strict=True):
        outcome = maybe or _CallOutcome(result=cancelled_result(call), cancelled=True)
        interrupted = interrupted or outcome.cancelled
        results.append(outcome.result)
        durations.append(outcome.ms or 0)
        changed.extend(outcome.changed)
        for record in outcome.reads:
            reads[record.path] = record.as_dict()
    return BatchOutcome(
        results=results,
        interrupted=interrupted,
        changed_files=changed,
        reads=list(reads.values()),
        durations_ms=durations,
    )


__all__ = [
    "DEFAULT_TOOL_BUDGET",
    "BatchOutcome",
    "LockTable",
    "Locks",
    "cancelled_result",
    "execute_batch",
    "new_tool_budget",
    "tool_backoff_ms",
    "unavailable_result",
]
