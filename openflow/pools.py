"""How big a worker is: its model pool, its tool pool and its workflow cache, run as one.

Model calls wait on the network nearly all their time, so one worker keeps hundreds in flight;
tool batches start processes and touch disks, so they stay few. Temporal's slot suppliers are
chosen before a task is polled, when its activity type is not yet known, so the two pools are
two task queues: the run's own (workflows, model turns, the small bookkeeping activities: the
model pool) and `contracts.tool_task_queue` of it (tool batches: the tool pool). Model turns
stay on the workflow's queue, where Temporal hands them to the worker inside the workflow
task's completion (eager dispatch) instead of a matching round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType

from temporalio.client import Client
from temporalio.worker import Worker

from openflow.memory import MemoryRelease
from openflow.settings import (
    DEFAULT_MODEL_POOL,
    DEFAULT_STICKY_TIMEOUT_S,
    DEFAULT_TOOL_POOL,
    DEFAULT_WORKFLOW_CACHE,
    DEFAULT_WORKFLOW_POLLERS,
    SettingsError,
    parse_pollers,
    parse_pool,
    parse_seconds,
    runtime_settings,
)


@dataclass(frozen=True)
class WorkerPools:
    """A worker's sizes (README, "Sizing a worker"); each is checked when it is made."""

    #: Model calls (and the run's bookkeeping activities) in flight at once.
    model: int = DEFAULT_MODEL_POOL
    #: Tool batches running at once (their calls also share OPENFLOW_TOOL_BUDGET).
    tool: int = DEFAULT_TOOL_POOL
    #: Runs kept in memory between their workflow tasks (a run evicted replays its history).
    workflow_cache: int = DEFAULT_WORKFLOW_CACHE
    #: How long a run's next workflow task waits for this worker before any worker may take it.
    sticky_timeout_s: float = DEFAULT_STICKY_TIMEOUT_S
    #: Workflow-task polls kept open: a fifth of them (at least one) for runs new to this
    #: worker (and runs whose sticky timeout passed), the rest for the runs it holds.
    workflow_pollers: int = DEFAULT_WORKFLOW_POLLERS

    def __post_init__(self) -> None:
        for name, value in (
            ("model", self.model),
            ("tool", self.tool),
            ("workflow_cache", self.workflow_cache),
        ):
            try:
                parse_pool(str(value))
            except ValueError as exc:
                raise SettingsError(f"{name} pool {value!r}: {exc}") from None
        try:
            parse_seconds(str(self.sticky_timeout_s))
        except ValueError as exc:
            raise SettingsError(f"sticky timeout {self.sticky_timeout_s!r}: {exc}") from None
        try:
            parse_pollers(str(self.workflow_pollers))
        except ValueError as exc:
            raise SettingsError(f"workflow pollers {self.workflow_pollers!r}: {exc}") from None

    @classmethod
    def from_environment(cls) -> WorkerPools:
        """The sizes OPENFLOW_MODEL_POOL, OPENFLOW_TOOL_POOL, OPENFLOW_WORKFLOW_CACHE,
        OPENFLOW_STICKY_TIMEOUT and OPENFLOW_WORKFLOW_POLLERS give (raises SettingsError
        naming a bad one)."""
        settings = runtime_settings()
        return cls(
            model=settings.model_pool,
            tool=settings.tool_pool,
            workflow_cache=settings.workflow_cache,
            sticky_timeout_s=settings.sticky_timeout,
            workflow_pollers=settings.workflow_pollers,
        )


_running = 0


class PooledWorker:
    """The run's worker and the tool pool's worker, started, run and stopped together.

    It is used like a `temporalio.worker.Worker`: `run()`, `shutdown()`, `async with`. When
    the last one in the process stops, `on_last_stop` runs (closing the provider clients).
    """

    def __init__(
        self,
        main: Worker,
        tools: Worker,
        on_last_stop: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.main = main
        self.tools = tools
        self._on_last_stop = on_last_stop
        self._context_task: asyncio.Task[None] | None = None

    @property
    def workers(self) -> tuple[Worker, Worker]:
        return (self.main, self.tools)

    @property
    def client(self) -> Client:
        return self.main.client

    @property
    def task_queue(self) -> str:
        return self.main.task_queue

    @property
    def is_running(self) -> bool:
        return self.main.is_running and self.tools.is_running

    @property
    def is_shutdown(self) -> bool:
        return self.main.is_shutdown and self.tools.is_shutdown

    async def run(self) -> None:
        """Run both until `shutdown()`; one failing stops the other and raises its error."""
        global _running
        _running += 1
        runs = [asyncio.create_task(worker.run()) for worker in self.workers]
        # Once a burst of work is over, what it left free goes back to the system.
        release = asyncio.create_task(MemoryRelease().run(), name="openflow-memory-release")
        try:
            done, _ = await asyncio.wait(runs, return_when=asyncio.FIRST_EXCEPTION)
            if any(not task.cancelled() and task.exception() is not None for task in done):
                await self.shutdown()
            for result in await asyncio.gather(*runs, return_exceptions=True):
                if isinstance(result, BaseException):
                    raise result
        except asyncio.CancelledError:
            for task in runs:
                task.cancel()
            await asyncio.gather(*runs, return_exceptions=True)
            raise
        finally:
            release.cancel()
            _running -= 1
            if _running == 0 and self._on_last_stop is not None:
                await self._on_last_stop()

    async def shutdown(self) -> None:
        """Stop polling on both queues and wait for their work to finish (or be cancelled)."""
        await asyncio.gather(*(worker.shutdown() for worker in self.workers))

    async def __aenter__(self) -> PooledWorker:
        self._context_task = asyncio.create_task(self.run(), name="openflow-worker")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()
        task, self._context_task = self._context_task, None
        if task is None:
            return
        if exc is None:
            await task
        else:
            with contextlib.suppress(Exception):
                await task


__all__ = ["PooledWorker", "WorkerPools"]
