"""A worker gives back what a burst of work left free once it is quiet, once a burst."""

from __future__ import annotations

import asyncio
import time

import pytest

from openflow.memory import MemoryRelease, _malloc_trim


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.mark.skipif(_malloc_trim() is None, reason="the C library has no malloc_trim")
async def test_a_quiet_interval_after_a_busy_one_releases_once() -> None:
    release = MemoryRelease(interval_s=0.2, busy_cpu_s=0.05, quiet_cpu_s=0.05)
    watch = asyncio.create_task(release.run())
    try:
        # A burst: the interval it falls in uses far more CPU than `busy_cpu_s`.
        await asyncio.to_thread(_burn, 0.3)
        deadline = time.monotonic() + 10
        while release.releases < 1:
            assert time.monotonic() < deadline, "no release after the burst went quiet"
            await asyncio.sleep(0.05)
        # Quiet from here on: no second release without a second burst.
        await asyncio.sleep(1.0)
        assert release.releases == 1
        await asyncio.to_thread(_burn, 0.3)
        deadline = time.monotonic() + 10
        while release.releases < 2:
            assert time.monotonic() < deadline, "no release after the second burst"
            await asyncio.sleep(0.05)
    finally:
        watch.cancel()
