"""Heartbeating while an activity awaits, so a dead worker is noticed and cancels arrive."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextvars import ContextVar
from typing import TypeVar

from temporalio import activity

#: The first beat: early, so a worker whose event loop stalls for a few seconds (a busy
#: machine) still beats within the heartbeat timeout (4 s) of the activity's start.
HEARTBEAT_FIRST_S = 0.5
#: The beats after it. The SDK sends the first beat at once and then at most one beat per
#: 0.8 of the heartbeat timeout (3.2 s), the newest recorded; a beat a second keeps one
#: recorded for every send at half the calls of one every 0.5 s (each call costs the worker
#: an asyncio task and an encode), so the server sees the same beats and cancellations
#: arrive as soon as before.
HEARTBEAT_EVERY_S = 1.0
T = TypeVar("T")

#: Whether the activity running here already heartbeats (an outer `heartbeating`).
_beating: ContextVar[bool] = ContextVar("openflow_heartbeating", default=False)


async def heartbeating(work: Awaitable[T], every_s: float = HEARTBEAT_EVERY_S) -> T:
    """Await `work` while heartbeating: a first beat after `HEARTBEAT_FIRST_S` (or `every_s`
    where that is sooner), then one every `every_s`.

    Outside an activity (the activities called as plain methods) it only awaits `work`, and
    inside an outer `heartbeating` too: that one beats already.
    """
    if not activity.in_activity() or _beating.get():
        return await work
    # The heartbeat timeout counts from the start, so a short call never needs a heartbeat
    # (one RPC saved per turn); a long one beats every `every_s` seconds. A timer of the
    # event loop, not a task: no task to start, cancel and wait out on every call. A first
    # beat later than half a second would spare a 5 s model turn one of its two beats (a
    # send at 2 s, the next due after the turn), but the 200-run batch of `bench.flight`
    # then lost 59 of its 200 turns to heartbeat timeouts: a saturated worker starts an
    # eagerly dispatched turn, and fires its timers, a second or two late.
    loop = asyncio.get_running_loop()
    timer: asyncio.TimerHandle | None = None

    def beat() -> None:
        nonlocal timer
        activity.heartbeat()
        timer = loop.call_later(every_s, beat)

    token = _beating.set(True)
    timer = loop.call_later(min(every_s, HEARTBEAT_FIRST_S), beat)
    try:
        return await work
    finally:
        timer.cancel()
        _beating.reset(token)


__all__ = ["HEARTBEAT_EVERY_S", "HEARTBEAT_FIRST_S", "heartbeating"]
