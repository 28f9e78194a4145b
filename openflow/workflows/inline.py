"""Workflow activations on the worker's own thread, one a turn of its event loop.

The SDK hands every activation to a thread pool, so it can tell a workflow that blocks its
thread (a deadlock) from one that works. An activation of `OpenFlowRun` is a few
milliseconds of pure Python under the GIL: the hop to a pool thread and back (waking the
thread, the GIL handed over and back, often more than once) costs the worker about as much
CPU as the activation's own work. `InlineExecutor` runs the activations the SDK submits on
the event loop's thread instead, one at a time, each in a callback of its own: between two
of them, everything else the loop has ready runs (the pollers that start activities and
send their heartbeats), as the pool's threads let it run between their GIL turns.

What it gives up is the SDK's deadlock detection: a workflow that never yields holds the
loop instead of failing its task after two seconds. `OpenFlowRun` blocks on nothing (no
I/O, no locks: the engine is pure). `build_worker` runs its activations here when
OPENFLOW_WORKFLOW_INLINE=1 (never under the sandbox); by default they go to the SDK's pool.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_Job = tuple[Callable[..., Any], tuple[Any, ...], Future[Any]]


class InlineExecutor(ThreadPoolExecutor):
    """An executor that runs what it is given on the submitting event loop's thread, one job
    a turn of the loop, in the order submitted."""

    def __init__(self) -> None:
        # No thread is ever started: `submit` never reaches the pool.
        super().__init__(max_workers=1, thread_name_prefix="openflow-inline")
        self._jobs: deque[_Job] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        loop = asyncio._get_running_loop()
        call = (lambda: fn(*args, **kwargs)) if kwargs else fn
        if loop is None:
            _run(call, args if not kwargs else (), future, None)
            return future
        self._loop = loop
        self._jobs.append((call, args if not kwargs else (), future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._next)
        return future

    def _next(self) -> None:
        """Run the oldest job; the next one waits for the loop's next turn."""
        loop = self._loop
        fn, args, future = self._jobs.popleft()
        try:
            _run(fn, args, future, loop)
        finally:
            if self._jobs and loop is not None:
                loop.call_soon(self._next)
            else:
                self._scheduled = False


def _run(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    future: Future[Any],
    loop: asyncio.AbstractEventLoop | None,
) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args)
    except BaseException as exc:  # the SDK reads it from the future, as from a thread's
        future.set_exception(exc)
    else:
        future.set_result(result)
    finally:
        # An activation makes its workflow's own loop the running one and clears it when it
        # ends: the worker's loop is put back.
        asyncio._set_running_loop(loop)


__all__ = ["InlineExecutor"]
