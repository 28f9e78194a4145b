"""What confining `bash` with bubblewrap costs per call: `true` confined against unconfined.

Each round runs the same `bash` calls through the tool, with OPENFLOW_TOOL_SANDBOX=auto (confined
when bubblewrap works) and =off, alternating, and prints the median wall time per call.

    python -m bench.confinement [--calls 50] [--rounds 3] [--network on|off]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from openflow.activities.tools.base import ToolContext
from openflow.activities.tools.bash import BashTool
from openflow.activities.tools.confine import describe
from openflow.engine.transcript import ToolCall


async def _per_call_ms(ctx: ToolContext, calls: int, command: str) -> float:
    tool = BashTool()
    call = ToolCall(id="c", name="bash", arguments={"command": command})
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        out = await tool.run(ctx, call, call.arguments)
        times.append((time.perf_counter() - start) * 1000)
        assert not out.is_error, out.content
    return statistics.median(times)


async def main(calls: int, rounds: int, network: str) -> None:
    os.environ["OPENFLOW_TOOL_NETWORK"] = network
    with tempfile.TemporaryDirectory() as tmp:
        work, run = Path(tmp) / "work", Path(tmp) / "run"
        work.mkdir()
        run.mkdir()
        ctx = ToolContext(run_id="r", node_id="n", execution_dir=work, run_dir=run)
        os.environ["OPENFLOW_TOOL_SANDBOX"] = "auto"
        print(describe())
        results: dict[str, list[float]] = {"auto": [], "off": []}
        for _ in range(rounds):
            for mode in ("auto", "off"):
                os.environ["OPENFLOW_TOOL_SANDBOX"] = mode
                results[mode].append(await _per_call_ms(ctx, calls, "true"))
        confined, bare = statistics.median(results["auto"]), statistics.median(results["off"])
        print(f"bash 'true' per call: confined {confined:.1f} ms, unconfined {bare:.1f} ms, ")
        print(f"cost of confinement: {confined - bare:+.1f} ms per call (network {network})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--network", choices=("on", "off"), default="on")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds, args.network))
    sys.exit(0)
