"""Heartbeating while an activity awaits, so a dead worker is noticed and cancels arrive."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from temporalio import activity

HEARTBEAT_EVERY_S = 0.5
T = TypeVar("T")


async def heartbeating(work: Awaitable[T], every_s: float = HEARTBEAT_EVERY_S) -> T:
    """Await `work` while heartbeating.

    Outside an activity (the activities called as plain methods) it only awaits `work`.
    """
    if not activity.in_activity():
        return await work

    async def beat() -> None:
        # The heartbeat timeout counts from the start, so a short call never needs a heartbeat
        # (one RPC saved per turn); a long one beats every `every_s` seconds.
        while True:
            await asyncio.sleep(every_s)
            activity.heartbeat()

    beater = asyncio.create_task(beat())
    try:
        return await work
    finally:
        beater.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beater


__all__ = ["HEARTBEAT_EVERY_S", "heartbeating"]
