"""Heartbeating while an activity awaits, so a dead worker is noticed and cancels arrive."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from contextvars import ContextVar
from typing import TypeVar

from temporalio import activity

#: The first beat: early, so a worker whose event loop stalls for a few seconds (a busy
#: machine) still beats within the heartbeat timeout (4 s) of the activity's start, and a stop
#: reaches the call soon.
HEARTBEAT_FIRST_S = 0.5
#: How long before its heartbeat timeout (counted from when the server started the attempt)
#: a call that beats late (`beat_late`: a model turn) sends its first beat, when its worker
#: started it soon enough to: 2.5 s into a 4 s timeout. The server's start, not the worker's:
#: a saturated worker starts an eagerly dispatched call up to two seconds after the server
#: did (1.8 s in the 200-run batch of `bench.flight`), while its timers then fire within
#: 0.15 s of their time. A first beat 2 s after the worker's start lost 59 of those 200 turns
#: to heartbeat timeouts, one 0.5 s after it cost every 5 s turn two beats (0.5 s, then the
#: SDK's next send 3.2 s later); one 2.5 s after the server's start lost none, and the SDK's
#: next send comes only after 5.7 s.
HEARTBEAT_MARGIN_S = 1.5
#: The beats after it. The SDK sends the first beat at once and then at most one beat per
#: 0.8 of the heartbeat timeout (3.2 s), the newest recorded; a beat a second keeps one
#: recorded for every send at half the calls of one every 0.5 s (each call costs the worker
#: an asyncio task and an encode), so the server sees the same beats and cancellations
#: arrive as soon as before.
HEARTBEAT_EVERY_S = 1.0
T = TypeVar("T")

#: Whether the activity running here already heartbeats (an outer `heartbeating`).
_beating: ContextVar[bool] = ContextVar("openflow_heartbeating", default=False)


async def heartbeating(
    work: Awaitable[T], every_s: float = HEARTBEAT_EVERY_S, *, beat_late: bool = False
) -> T:
    """Await `work` while heartbeating: a first beat after `HEARTBEAT_FIRST_S` (or `every_s`
    where that is sooner), then one every `every_s`.

    `beat_late`: the first beat `HEARTBEAT_MARGIN_S` before the activity's heartbeat timeout
    runs out, counted from when the server started it (`first_beat_s`), for a call whose
    stop nobody waits for (a model turn: the workflow cancels it without waiting, while a
    tool batch's stop waits for its processes to end, which the first beat delivers).

    Outside an activity (the activities called as plain methods) it only awaits `work`, and
    inside an outer `heartbeating` too: that one beats already.
    """
    if not activity.in_activity() or _beating.get():
        return await work
    # The heartbeat timeout counts from the start, so a short call never needs a heartbeat
    # (one RPC saved per turn); a long one beats every `every_s` seconds. A timer of the
    # event loop, not a task: no task to start, cancel and wait out on every call. The SDK
    # sends the first beat at once and the next ones from its own timer (not this loop's),
    # so only the first one's time depends on how busy this worker is.
    loop = asyncio.get_running_loop()
    timer: asyncio.TimerHandle | None = None

    def beat() -> None:
        nonlocal timer
        activity.heartbeat()
        timer = loop.call_later(every_s, beat)

    token = _beating.set(True)
    soonest = min(every_s, HEARTBEAT_FIRST_S)
    timer = loop.call_later(first_beat_s(soonest) if beat_late else soonest, beat)
    try:
        return await work
    finally:
        timer.cancel()
        _beating.reset(token)


def first_beat_s(soonest: float = HEARTBEAT_FIRST_S) -> float:
    """Seconds from now to the running activity's first late beat: `HEARTBEAT_MARGIN_S`
    before its heartbeat timeout runs out, counted from the server's start of the attempt;
    after `soonest` when that would be sooner, when the activity has no heartbeat timeout, or
    when the worker's clock is behind the server's start (a clock that cannot be trusted for
    the wait)."""
    info = activity.info()
    timeout = info.heartbeat_timeout
    if timeout is None:
        return soonest
    elapsed = time.time() - info.started_time.timestamp()
    if elapsed < 0:
        return soonest
    return max(soonest, timeout.total_seconds() - HEARTBEAT_MARGIN_S - elapsed)


__all__ = ["HEARTBEAT_EVERY_S", "HEARTBEAT_FIRST_S", "HEARTBEAT_MARGIN_S", "heartbeating"]
