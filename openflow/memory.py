"""A worker gives back the memory a burst of work left free once the burst is over.

Starting hundreds of runs at once fills the worker's allocators with what their first
workflow tasks and model turns use and then drop: request bodies, activations, cyclic garbage
of the turns. glibc's malloc keeps the pages of such freed chunks (inside each thread's arena,
not only at its top) resident until `malloc_trim` hands them back, and the cyclic collector's
garbage waits for its next full pass. A worker that then holds those runs paused for days
would keep that high-water mark as its resident memory: measured on 500 runs started at once
and left waiting for a person, 15-25 KB a run (bench/scale.py, the paused phase).

`MemoryRelease` watches the process's CPU time: after an interval that was busy, the first
quiet one (the worker all but idle) collects garbage and trims malloc's free pages, once. A
worker under steady load never trims (its freed memory is used again right away), and an
idle worker trims at most once after each burst.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import time
from collections.abc import Callable

#: Seconds between looks at the process's CPU time.
INTERVAL_S = 1.0
#: CPU seconds an interval must use to count as busy (a tenth of one core).
BUSY_CPU_S = 0.1
#: CPU seconds an interval may use and still count as quiet (the pollers' and heartbeats').
QUIET_CPU_S = 0.03


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
    """After a burst of work, gives back what the process's allocators hold free (`run`)."""

    def __init__(
        self,
        interval_s: float = INTERVAL_S,
        busy_cpu_s: float = BUSY_CPU_S,
        quiet_cpu_s: float = QUIET_CPU_S,
    ) -> None:
        self.interval_s = interval_s
        self.busy_cpu_s = busy_cpu_s
        self.quiet_cpu_s = quiet_cpu_s
        self._trim = _malloc_trim()
        #: Bursts released so far.
        self.releases = 0

    async def run(self) -> None:
        """Watch until cancelled."""
        last = time.process_time()
        dirty = False
        while True:
            await asyncio.sleep(self.interval_s)
            now = time.process_time()
            used, last = now - last, now
            if used >= self.busy_cpu_s:
                dirty = True
            elif dirty and used <= self.quiet_cpu_s:
                dirty = False
                await self.release()
                last = time.process_time()

    async def release(self) -> None:
        """Collect cyclic garbage (on the event loop's thread, where asyncio's finalizers
        expect to run), then trim malloc's free pages in a thread (ctypes lets go of the
        GIL, so workflow tasks and activities go on meanwhile)."""
        gc.collect()
        if self._trim is not None:
            await asyncio.to_thread(self._trim)
        self.releases += 1


__all__ = ["MemoryRelease"]
