"""Heartbeating: a long activity beats on its own schedule, once however deep the calls go."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.testing import ActivityEnvironment

from openflow.activities.heartbeat import heartbeating


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
