"""Blocking calls made off the event loop in shared thread hops: each caller gets its own
result or error, after its call returned, in the context it called from."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from openflow.activities.hops import Hops

_who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def _slow_square(n: int) -> tuple[int, str, int]:
    time.sleep(0.001)
    return n * n, _who.get(), threading.get_ident()


def test_concurrent_calls_each_get_their_own_result_off_the_loop() -> None:
    hops = Hops()

    async def one(n: int) -> tuple[int, str, int]:
        _who.set(f"caller {n}")
        return await hops.run(_slow_square, n)

    async def main() -> list[tuple[int, str, int]]:
        return await asyncio.gather(*(one(n) for n in range(200)))

    results = asyncio.run(main())
    assert [r[0] for r in results] == [n * n for n in range(200)]
    assert [r[1] for r in results] == [f"caller {n}" for n in range(200)]
    # Off the loop's thread; a burst ran in more than one thread.
    assert threading.get_ident() not in {r[2] for r in results}
    assert len({r[2] for r in results}) > 1


def test_an_error_reaches_its_caller_alone() -> None:
    hops = Hops()

    def fails(n: int) -> int:
        if n == 3:
            raise ValueError("disk full")
        return n

    async def main() -> list[object]:
        return await asyncio.gather(*(hops.run(fails, n) for n in range(8)), return_exceptions=True)

    results = asyncio.run(main())
    assert [r for i, r in enumerate(results) if i != 3] == [0, 1, 2, 4, 5, 6, 7]
    assert isinstance(results[3], ValueError) and str(results[3]) == "disk full"


def test_one_helper_serves_one_loop_after_another() -> None:
    hops = Hops()

    async def main(n: int) -> tuple[int, str, int]:
        return await asyncio.wait_for(hops.run(_slow_square, n), 5)

    for n in range(3):
        assert asyncio.run(main(n))[0] == n * n
    with pytest.raises(RuntimeError):
        hops.run(_slow_square, 1)  # outside a loop, as asyncio.to_thread
