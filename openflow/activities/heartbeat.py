"""Heartbeating while an activity awaits, so a dead worker is noticed and cancels arrive."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextvars import ContextVar
from typing import TypeVar

from temporalio import activity

HEARTBEAT_EVERY_S = 0.5
T = TypeVar("T")

#: Whether the activity running here already heartbeats (an outer `heartbeating`).
_beating: ContextVar[bool] = ContextVar("openflow_heartbeating", default=False)


async def heartbeating(work: Awaitable[T], every_s: float = HEARTBEAT_EVERY_S) -> T:
    """Await `work` while heartbeating.

    Outside an activity (the activities called as plain methods) it only awaits `work`, and
    inside an outer `heartbeating` too: that one beats already.
    """
    if not activity.in_activity() or _beating.get():
        return await work
    # The heartbeat timeout counts from the start, so a short call never needs a heartbeat
    # (one RPC saved per turn); a long one beats every `every_s` seconds. A timer of the
    # event loop, not a task: no task to start, cancel and wait out on every call.
    loop = asyncio.get_running_loop()
    timer: asyncio.TimerHandle | None = None

    def beat() -> None:
        nonlocal timer
        activity.heartbeat()
        timer = loop.call_later(every_s, beat)

    token = _beating.set(True)
    timer = loop.call_later(every_s, beat)
    try:
        return await work
    finally:
        timer.cancel()
        _beating.reset(token)


__all__ = ["HEARTBEAT_EVERY_S", "heartbeating"]
