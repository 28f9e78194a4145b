"""Blocking calls of activities run off the event loop, concurrent ones in one thread hop.

`asyncio.to_thread` costs the loop, for each call, an executor submit (a `concurrent.futures`
future with its condition, the pool's idle semaphore, and the wake-up of a thread: on a busy
machine the woken thread takes the loop's core while the loop still holds the GIL), a future
chained to the loop's, and a wake-up of the loop (`call_soon_threadsafe`) when the call ends.
Here a call waits in a queue for threads of its own, a thread on its way takes every call
queued by then (a few at most, so a burst still writes in parallel), and one wake-up of the
loop hands back all their results. Under load many turns end at once and share a hop; a call
alone costs the loop about half of what `to_thread` costs.

What each call does is unchanged (its writes and their syncs are its own), and its result
comes back only once it has returned: a caller awaiting a write knows it is on disk.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: The most calls one thread hop makes: a burst of syncing writes spreads over the threads,
#: so one thread never makes a long queue of them wait on each other's syncs.
MOST_A_HOP = 4
#: Threads for the hops: as many syncs at once as a burst needs (the disk groups them).
HOP_THREADS = 8

_Call = tuple[Callable[[], Any], "asyncio.Future[Any]"]
_Done = list[tuple["asyncio.Future[Any]", Any, BaseException | None]]


class _Queued:
    """The calls made on one event loop and not yet taken by a thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.calls: collections.deque[_Call] = collections.deque()
        #: Hops asked of the threads that have not yet taken their calls.
        self.hops = 0


class Hops:
    """Calls off one event loop, coalesced into as few thread hops as the load allows."""

    def __init__(self, most: int = MOST_A_HOP, threads: int = HOP_THREADS) -> None:
        self.most = most
        self.threads = threads
        self._hops: queue.SimpleQueue[_Queued] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._queued: _Queued | None = None
        self._started = 0

    def run(self, fn: Callable[..., T], /, *args: Any) -> asyncio.Future[T]:
        """`fn(*args)` in a thread, with this context (as `asyncio.to_thread` runs it)."""
        loop = asyncio.get_running_loop()
        queued = self._queued
        if queued is None or queued.loop is not loop:
            # A new loop (tests run one each): calls queued for an old one stay its own.
            queued = self._queued = _Queued(loop)
        future: asyncio.Future[T] = loop.create_future()
        queued.calls.append((functools.partial(contextvars.copy_context().run, fn, *args), future))
        with self._lock:
            ask = queued.hops == 0
            if ask:
                queued.hops = 1
        if ask:
            self._ask(queued)
        return future

    def _ask(self, queued: _Queued) -> None:
        """A hop for the calls queued: a thread waiting takes it (one is started while fewer
        than `threads` are)."""
        if self._started < self.threads:
            with self._lock:
                start = self._started < self.threads
                self._started += start
            if start:
                threading.Thread(target=self._serve, name="openflow-hops", daemon=True).start()
        self._hops.put(queued)

    def _serve(self) -> None:
        while True:
            self._hop(self._hops.get())

    def _hop(self, queued: _Queued) -> None:
        """Make the calls queued by now (at most `most`), then hand back their results."""
        taken: list[_Call] = []
        with self._lock:
            queued.hops -= 1
            calls = queued.calls
            while calls and len(taken) < self.most:
                taken.append(calls.popleft())
            more = bool(calls) and queued.hops == 0
            if more:
                queued.hops += 1
        if more:
            # What is left goes in a hop of its own, beside this one.
            self._ask(queued)
        done: _Done = []
        for call, future in taken:
            try:
                done.append((future, call(), None))
            except BaseException as exc:  # handed to its caller, as to_thread would
                done.append((future, None, exc))
        if done:
            # A loop closed meanwhile has nobody awaiting these.
            with contextlib.suppress(RuntimeError):
                queued.loop.call_soon_threadsafe(_settle, done)


def _settle(done: _Done) -> None:
    for future, result, exc in done:
        if future.cancelled():
            continue
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)


__all__ = ["HOP_THREADS", "MOST_A_HOP", "Hops"]
