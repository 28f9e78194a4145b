"""A worker killed with kill -9 takes every process its tools started with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

_WORKER = r"""
import asyncio, sys
from pathlib import Path

from openflow.activities.tools import (
    LockTable, ToolContext, default_registry, execute_batch, new_tool_budget,
)
from openflow.engine.transcript import ToolCall

folder = Path(sys.argv[1])
# A background job, a daemon that left the group, and one started after its parent exited.
command = (
    "sleep 300 & echo $! > bg.pid; "
    "setsid sleep 300 & echo $! > daemon.pid; "
    "(setsid sleep 300 & echo $! > orphan.pid) ; "
    "echo $$ > bash.pid; sleep 300"
)
ctx = ToolContext(run_id="r", node_id="n", execution_dir=folder, run_dir=folder, env={})
asyncio.run(execute_batch(
    ctx, [ToolCall(id="1", name="bash", arguments={"command": command})],
    default_registry(), LockTable(), new_tool_budget(), None,
))
"""

PIDS = ("bg.pid", "daemon.pid", "orphan.pid", "bash.pid")


async def test_a_killed_worker_leaves_no_tool_process_behind(
    tmp_path: Path, command_pid_alive, wait_until
) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_WORKER), str(tmp_path)], env=env, cwd=REPO
    )
    try:
        await wait_until(lambda: all((tmp_path / name).is_file() for name in PIDS), timeout=20)
        await wait_until(lambda: all((tmp_path / name).read_text().strip() for name in PIDS))
        pids = [int((tmp_path / name).read_text()) for name in PIDS]
        assert all(command_pid_alive(tmp_path, pid) for pid in pids)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        await wait_until(
            lambda: not any(command_pid_alive(tmp_path, pid) for pid in pids), timeout=5
        )
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
