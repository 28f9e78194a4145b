"""A worker gives back the memory a burst of work left free once the burst is over.

Starting hundreds of runs at once fills the worker's allocators with what their first
workflow tasks and model turns use and then drop: request bodies, activations, the SDK
core's buffers. glibc's malloc keeps the pages of such freed chunks (inside each thread's
arena, not only at its top) resident until `malloc_trim` hands them back, so a worker that
then holds those runs paused for days would keep that high-water mark as resident memory:
2-10 MB after 500 runs started at once and left waiting for a person (4-20 KB a run of the
burst, bench/scale.py's paused phase), and about 4-10 MB after the worker's first runs.

`MemoryRelease` watches the process's CPU time: once an interval was busy, the first
`QUIET_INTERVALS` quiet ones in a row (the worker all but idle) trim malloc's free pages, once,
in a thread. A worker under steady load never trims (its freed memory is used again right
away), and an idle one trims at most once after each burst. The trim holds each arena's lock
while it walks it (a few milliseconds, up to a few tens for a worker of thousands of runs):
it runs only when nothing else does.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import time
from collections.abc import Callable

#: Seconds between looks at the process's CPU time.
INTERVAL_S = 1.0
#: CPU seconds an interval must use to count as busy (a tenth of one core).
BUSY_CPU_S = 0.1
#: CPU seconds an interval may use and still count as quiet (the pollers' and heartbeats').
QUIET_CPU_S = 0.03
#: Quiet intervals in a row after a busy one before the trim.
QUIET_INTERVALS = 2


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's `malloc_trim(0)`, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class MemoryRelease:
    """After a burst of work, gives back what the process's allocator holds free (`run`); a
    no-op where the C library has no `malloc_trim`."""

    def __init__(
        self,
        interval_s: float = INTERVAL_S,
        busy_cpu_s: float = BUSY_CPU_S,
        quiet_cpu_s: float = QUIET_CPU_S,
        quiet_intervals: int = QUIET_INTERVALS,
    ) -> None:
        self.interval_s = interval_s
        self.busy_cpu_s = busy_cpu_s
        self.quiet_cpu_s = quiet_cpu_s
        self.quiet_intervals = quiet_intervals
        self._trim = _malloc_trim()
        #: Bursts released so far.
        self.releases = 0

    async def run(self) -> None:
        """Watch until cancelled."""
        if self._trim is None:
            return
        last = time.process_time()
        dirty, quiet = False, 0
        while True:
            await asyncio.sleep(self.interval_s)
            now = time.process_time()
            used, last = now - last, now
            if used >= self.busy_cpu_s:
                dirty, quiet = True, 0
            elif dirty and used <= self.quiet_cpu_s:
                quiet += 1
                if quiet >= self.quiet_intervals:
                    dirty, quiet = False, 0
                    await self.release()
                    last = time.process_time()
            else:
                quiet = 0

    async def release(self) -> None:
        """Trim malloc's free pages, in a thread (ctypes lets go of the GIL, so the event
        loop and the workflow tasks go on meanwhile)."""
        if self._trim is not None:
            await asyncio.to_thread(self._trim)
        self.releases += 1


__all__ = ["MemoryRelease"]
