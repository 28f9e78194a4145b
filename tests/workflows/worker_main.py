"""A worker in its own process, for tests that kill it: `python -m tests.workflows.worker_main`."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from openflow.worker import build_worker, connect


async def main() -> None:
    client = await connect(os.environ["OPENFLOW_TEMPORAL_ADDRESS"])
    worker = build_worker(
        client, os.environ["OPENFLOW_TASK_QUEUE"], Path(os.environ["OPENFLOW_HOME"])
    )
    print("worker ready", flush=True)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
