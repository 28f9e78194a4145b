"""Heartbeating: a long activity beats on its own schedule, once however deep the calls go."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.testing import ActivityEnvironment

from openflow.activities.heartbeat import HEARTBEAT_FIRST_S, HEARTBEAT_MARGIN_S, heartbeating
from openflow.workflows.calls import HEARTBEAT_TIMEOUT


async def test_a_long_call_beats_and_an_inner_heartbeating_adds_no_beats() -> None:
    beats: list[object] = []

    @activity.defn(name="beating")
    async def beating() -> int:
        async def inner() -> int:
            await asyncio.sleep(0.25)
            # Would beat every 20 ms on its own: the outer one already beats.
            return await heartbeating(asyncio.sleep(0.3, result=7), every_s=0.02)

        return await heartbeating(inner(), every_s=0.1)

    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    assert await env.run(beating) == 7
    assert 3 <= len(beats) <= 6


async def test_a_short_call_sends_no_heartbeat_and_outside_an_activity_it_only_awaits() -> None:
    beats: list[object] = []

    @activity.defn(name="short")
    async def short() -> str:
        return await heartbeating(asyncio.sleep(0, result="done"), every_s=0.5)

    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    assert await env.run(short) == "done"
    assert beats == []
    assert await heartbeating(asyncio.sleep(0, result=1)) == 1


async def test_a_long_call_keeps_a_beat_recorded_for_every_send_the_sdk_makes() -> None:
    """The SDK sends the first beat at once, then the newest one recorded every 0.8 of the
    heartbeat timeout: beats at that interval's half or less leave none of its sends
    without a beat, so the server sees a beat as often as the SDK allows."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    beats: list[float] = []

    @activity.defn(name="long")
    async def long() -> str:
        return await heartbeating(asyncio.sleep(2.2, result="done"))

    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(loop.time() - began)
    assert await env.run(long) == "done"
    throttle_s = 0.8 * HEARTBEAT_TIMEOUT.total_seconds()
    assert len(beats) >= 2
    assert HEARTBEAT_FIRST_S - 0.05 <= beats[0] < HEARTBEAT_TIMEOUT.total_seconds() / 2
    assert all(0 < b - a <= throttle_s / 2 for a, b in zip(beats, beats[1:], strict=False))


async def test_a_late_first_beat_waits_for_the_heartbeat_timeout_from_the_servers_start() -> None:
    """A call that beats late (a model turn) beats `HEARTBEAT_MARGIN_S` before its heartbeat
    timeout runs out from the server's start (a 5 s turn then sends one beat, not two); one
    started too late for that, or whose worker's clock is behind the server's, beats after
    `HEARTBEAT_FIRST_S` as other calls do."""
    loop = asyncio.get_running_loop()
    timeout_s = HEARTBEAT_TIMEOUT.total_seconds()

    async def first_beat(started_ago_s: float) -> float:
        began = loop.time()
        beats: list[float] = []

        @activity.defn(name="long")
        async def long() -> str:
            return await heartbeating(asyncio.sleep(1.3, result="done"), beat_late=True)

        env = ActivityEnvironment()
        env.info = dataclasses.replace(
            env.info,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            started_time=datetime.now(UTC) - timedelta(seconds=started_ago_s),
        )
        env.on_heartbeat = lambda *details: beats.append(loop.time() - began)
        assert await env.run(long) == "done"
        return beats[0]

    # Started 1.5 s before the worker got to it: the first beat comes 1 s later, 2.5 s after
    # the server's start.
    waited, too_late, clock_behind = await asyncio.gather(
        first_beat(timeout_s - HEARTBEAT_MARGIN_S - 1.0),
        first_beat(timeout_s),
        first_beat(-30.0),
    )
    assert 0.95 <= waited < 1.25
    assert HEARTBEAT_FIRST_S - 0.05 <= too_late < HEARTBEAT_FIRST_S + 0.25
    assert HEARTBEAT_FIRST_S - 0.05 <= clock_behind < HEARTBEAT_FIRST_S + 0.25
