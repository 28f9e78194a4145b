"""Blocking calls of activities run off the event loop, concurrent ones in one thread hop.

`asyncio.to_thread` costs the loop, for each call, an executor submit (a `concurrent.futures`
future with its condition, the pool's idle semaphore, and the wake-up of a thread: on a busy
machine the woken thread takes the loop's core while the loop still holds the GIL), a future
chained to the loop's, and a wake-up of the loop (`call_soon_threadsafe`) when the call ends.
Here a call waits in a queue for threads of its own. A thread is woken only when none is at
work on the queue: one at work takes the calls queued meanwhile when it is done with its own
(a few a hop; a longer backlog wakes another thread beside it, so a burst still writes in
parallel), and one wake-up of the loop hands back the results of a hop. Under load the turns
ending one after another share a thread that stays awake; a call alone costs the loop about
half of what `to_thread` costs.

What each call does is unchanged (its writes and their syncs are its own), and its result
comes back only once it has returned: a caller awaiting a write knows it is on disk.
"""

from __future__ import annotations

import asyncio
import collections
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
        #: Threads taking these calls (woken for them, or at work on them).
        self.takers = 0


class Hops:
    """Calls off one event loop, coalesced into as few thread hops as the load allows."""

    def __init__(self, most: int = MOST_A_HOP, threads: int = HOP_THREADS) -> None:
        self.most = most
        self.threads = threads
        self._wake: queue.SimpleQueue[_Queued] = queue.SimpleQueue()
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
            # A thread at work takes the call when it is done with its own: no wake-up.
            wake = queued.takers == 0
            queued.takers += wake
        if wake:
            self._wake_one(queued)
        return future

    def _wake_one(self, queued: _Queued) -> None:
        """A thread to take the calls queued (one more is started while fewer than `threads`
        are)."""
        if self._started < self.threads:
            with self._lock:
                start = self._started < self.threads
                self._started += start
            if start:
                threading.Thread(target=self._serve, name="openflow-hops", daemon=True).start()
        self._wake.put(queued)

    def _serve(self) -> None:
        while True:
            self._take(self._wake.get())

    def _take(self, queued: _Queued) -> None:
        """Make the calls queued (at most `most` a hop) and hand back their results, hop
        after hop until none are left; a backlog of more wakes another thread beside this."""
        while True:
            taken: list[_Call] = []
            with self._lock:
                calls = queued.calls
                while calls and len(taken) < self.most:
                    taken.append(calls.popleft())
                if not taken:
                    queued.takers -= 1
                    return
                helper = len(calls) > self.most and queued.takers < self.threads
                queued.takers += helper
            if helper:
                self._wake_one(queued)
            done: _Done = []
            for call, future in taken:
                try:
                    done.append((future, call(), None))
                except BaseException as exc:  # handed to its caller, as to_thread would
                    done.append((future, None, exc))
            try:
                queued.loop.call_soon_threadsafe(_settle, done)
            except RuntimeError:  # the loop closed meanwhile: nobody awaits these
                with self._lock:
                    queued.calls.clear()


def _settle(done: _Done) -> None:
    for future, result, exc in done:
        if future.cancelled():
            continue
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)


__all__ = ["HOP_THREADS", "MOST_A_HOP", "Hops"]
