"""Activations on the worker's event loop (`OPENFLOW_WORKFLOW_INLINE=1`): each runs on the
loop's thread, in the order submitted, one a turn of the loop, with the loop still running
after it."""

from __future__ import annotations

import asyncio
import threading

from openflow.workflows.inline import InlineExecutor


def test_jobs_run_on_the_loop_thread_in_order_one_a_turn() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        executor = InlineExecutor()
        seen: list[str] = []

        def job(name: str) -> str:
            assert threading.current_thread() is threading.main_thread()
            asyncio._set_running_loop(None)  # as an activation leaves it
            seen.append(name)
            return name

        async def ticker() -> None:
            for _ in range(3):
                seen.append("tick")
                await asyncio.sleep(0)

        ticks = asyncio.create_task(ticker())
        futures = [loop.run_in_executor(executor, job, name) for name in ("a", "b", "c")]
        assert await asyncio.gather(*futures) == ["a", "b", "c"]
        await ticks
        assert asyncio.get_running_loop() is loop
        # Other callbacks ran between the jobs.
        order = [s for s in seen if s != "tick"]
        assert order == ["a", "b", "c"]
        assert seen.index("c") - seen.index("a") > 2

    asyncio.run(main())


def test_a_failing_job_fails_its_future_only() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        executor = InlineExecutor()

        def boom() -> None:
            raise ValueError("bad")

        failing = loop.run_in_executor(executor, boom)
        fine = loop.run_in_executor(executor, lambda: 7)
        results = await asyncio.gather(failing, fine, return_exceptions=True)
        assert isinstance(results[0], ValueError) and results[1] == 7

    asyncio.run(main())
