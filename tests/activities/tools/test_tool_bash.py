"""bash: exit codes, live streaming, timeouts and cancel that kill the whole group, no secrets."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openflow.activities.tools import ToolContext
from openflow.activities.tools.bash import BashTool
from openflow.engine.transcript import ToolCall

REPO = Path(__file__).resolve().parents[3]


async def test_output_and_exit_code(harness) -> None:
    ok = await harness.one("bash", {"command": "echo out; echo err >&2"})
    assert not ok.is_error
    assert ok.content == "out\nerr\n[exit code 0]"
    assert ok.output_meta == {"exit_code": 0}
    failed = await harness.one("bash", {"command": "exit 7"})
    assert failed.is_error
    assert failed.content == "[no output] [exit code 7]"


async def test_cwd_env_and_minimal_environment(harness) -> None:
    (harness.workdir / "sub").mkdir()
    result = await harness.one(
        "bash",
        {
            "command": 'pwd; echo "$GREETING"; env | cut -d= -f1 | sort',
            "cwd": "sub",
            "env": {"GREETING": "hello"},
        },
        env={"RUN_VAR": "1"},
    )
    lines = result.content.splitlines()
    assert lines[0] == str(harness.workdir.resolve() / "sub")
    assert lines[1] == "hello"
    names = set(lines[2:-1])
    assert {"GREETING", "RUN_VAR", "PATH", "HOME", "LANG"} <= names
    assert not any(name.endswith("_API_KEY") for name in names)


async def test_output_streams_to_live_while_running(harness, wait_until) -> None:
    release = harness.workdir / "release"
    task = asyncio.create_task(
        harness.one(
            "bash",
            {"command": f"echo first; while [ ! -e {release} ]; do sleep 0.05; done; echo second"},
        )
    )
    await wait_until(lambda: any("first" in u["content"] for u in harness.live))
    assert not task.done()
    update = harness.live[0]
    assert update["type"] == "ToolUpdated"
    assert (update["node_id"], update["tool_call_id"], update["tool_name"]) == (
        "node",
        "c1",
        "bash",
    )
    release.write_text("")
    result = await task
    assert result.content == "first\nsecond\n[exit code 0]"
    assert "second" in "".join(u["content"] for u in harness.live)
    assert harness.events == []


async def test_timeout_kills_grandchildren(harness, pid_alive, wait_until) -> None:
    pidfile = harness.workdir / "pid"
    command = f"echo started; (sleep 300 & echo $! > {pidfile}; wait) ; echo never"
    result = await harness.one("bash", {"command": command, "timeout": 1})
    assert result.is_error
    assert result.content.startswith("[timeout] bash timed out after 1s — ")
    assert "Output before the timeout:\nstarted" in result.content
    grandchild = int(pidfile.read_text())
    await wait_until(lambda: not pid_alive(grandchild))


async def test_cancel_kills_grandchildren(harness, pid_alive, wait_until) -> None:
    pidfile = harness.workdir / "pid"
    ctx = harness.ctx()
    task = asyncio.create_task(
        harness.run(("bash", {"command": f"sleep 300 & echo $! > {pidfile}; wait"}), ctx=ctx)
    )
    await wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "")
    grandchild = int(pidfile.read_text())
    assert pid_alive(grandchild)
    ctx.cancel.set()
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.interrupted
    assert outcome.results[0].content == "[cancelled] bash was cancelled"
    await wait_until(lambda: not pid_alive(grandchild))


async def test_task_cancellation_also_kills_the_group(harness, pid_alive, wait_until) -> None:
    pidfile = harness.workdir / "pid"
    ctx = harness.ctx()
    call = ToolCall(
        id="c1", name="bash", arguments={"command": f"sleep 300 & echo $! > {pidfile}; wait"}
    )
    task = asyncio.create_task(BashTool().run(ctx, call, call.arguments))
    await wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "")
    grandchild = int(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not pid_alive(grandchild))


async def test_background_processes_do_not_outlive_the_command(
    harness, pid_alive, wait_until
) -> None:
    pidfile = harness.workdir / "pid"
    result = await harness.one(
        "bash", {"command": f"sleep 300 > /dev/null 2>&1 & echo $! > {pidfile}"}
    )
    assert result.content == "[no output] [exit code 0]"
    await wait_until(lambda: not pid_alive(int(pidfile.read_text())))


async def test_timeout_limits_are_checked(harness) -> None:
    result = await harness.one("bash", {"command": "true", "timeout": 4000})
    assert result.content.startswith(
        "[invalid_args] bash: 'timeout' 4000s is over the 3600s maximum"
    )


_PROBE = r"""
import asyncio, subprocess, sys
from pathlib import Path

from openflow.activities.tools import (
    LockTable, ToolContext, default_registry, execute_batch, harden_process, new_tool_budget,
)
from openflow.engine.transcript import ToolCall

probe = "tr '\\0' '\\n' < /proc/$PPID/environ; echo ---; env"
# Control: without the tool's protections a child does see the variable.
control = subprocess.run(["/bin/bash", "-c", probe], env={"PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True)
print("CONTROL", "OPENFLOW_TEST_SECRET=" in control.stdout)
harden_process()
ctx = ToolContext(run_id="r", node_id="n", execution_dir=Path(sys.argv[1]),
                  run_dir=Path(sys.argv[1]), env={"VISIBLE": "yes"})
outcome = asyncio.run(execute_batch(
    ctx, [ToolCall(id="1", name="bash", arguments={"command": probe})],
    default_registry(), LockTable(), new_tool_budget(), None,
))
print("TOOL", outcome.results[0].content)
"""


def test_tool_processes_cannot_read_the_workers_secrets(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "OPENFLOW_TEST_SECRET": "hunter2-do-not-leak",
    }
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PROBE), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "CONTROL True" in proc.stdout, "the probe must detect an unprotected environment"
    tool_output = proc.stdout.split("TOOL ", 1)[1]
    assert "VISIBLE=yes" in tool_output
    assert "/environ: Permission denied" in tool_output
    assert "hunter2-do-not-leak" not in tool_output
    assert "OPENFLOW_TEST_SECRET" not in tool_output


def test_context_defaults_conversation_to_node(tmp_path: Path) -> None:
    ctx = ToolContext(run_id="r", node_id="alpha", execution_dir=tmp_path, run_dir=tmp_path)
    assert ctx.conversation == "alpha"
