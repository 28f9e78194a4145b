"""bash runs confined by bubblewrap: it writes only to its folder and /tmp, and cannot see secrets.

Skipped only where bubblewrap is missing or cannot run (CI installs it, so these run there).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from openflow.activities.tools.confine import describe, unavailable
from tests.activities.tools.conftest import Harness

SECRET = "sk-planted-secret-5c1e"
_WHY = unavailable(True)
needs_bwrap = pytest.mark.skipif(_WHY is not None, reason=f"no confinement here: {_WHY}")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An $OPENFLOW_HOME whose settings.json holds a provider key."""
    folder = tmp_path / "home"
    folder.mkdir()
    settings = {"providers": {"openai": {"api_key": SECRET}}, "api_keys": {SECRET: "team"}}
    (folder / "settings.json").write_text(json.dumps(settings))
    monkeypatch.setenv("OPENFLOW_HOME", str(folder))
    monkeypatch.delenv("OPENFLOW_TOOL_SANDBOX", raising=False)
    monkeypatch.delenv("OPENFLOW_TOOL_NETWORK", raising=False)
    return folder


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "canary.txt"
    path.parent.mkdir()
    path.write_text("untouched\n")
    return path


@needs_bwrap
async def test_bash_writes_only_inside_its_folder_and_tmp(
    harness: Harness, home: Path, canary: Path
) -> None:
    outside = canary.parent
    command = (
        f"echo pwned > {canary}; touch {outside}/new; touch /etc/openflow-escape; "
        "echo inside > here.txt && echo scratch > /tmp/scratch && cat /tmp/scratch"
    )
    result = await harness.one("bash", {"command": command}, home=home)
    assert "Read-only file system" in result.content, result.content
    assert canary.read_text() == "untouched\n"
    assert sorted(p.name for p in outside.iterdir()) == ["canary.txt"]
    assert not Path("/etc/openflow-escape").exists()
    assert (harness.workdir / "here.txt").read_text() == "inside\n"
    assert result.content.endswith("scratch\n[exit code 0]")
    later = await harness.one("bash", {"command": "cat /tmp/scratch"}, home=home)
    assert later.content == "scratch\n[exit code 0]", "a run's /tmp lasts across its commands"


@needs_bwrap
async def test_bash_cannot_read_settings_json(harness: Harness, home: Path) -> None:
    probe = (
        f"cat {home}/settings.json; ls -A {home}; grep -rs {SECRET} {home} /tmp; "
        "cat /proc/$PPID/environ; echo done"
    )
    result = await harness.one("bash", {"command": probe}, home=home)
    assert "No such file or directory" in result.content
    assert SECRET not in result.content
    assert result.content.endswith("done\n[exit code 0]")


@needs_bwrap
async def test_a_folder_inside_openflow_home_stays_usable(tmp_path: Path, home: Path) -> None:
    """The default execution folder, `runs/<id>/workspace`, lies inside the hidden home."""
    workspace = home / "runs" / "r1" / "workspace"
    workspace.mkdir(parents=True)
    harness = Harness(workdir=workspace, run_dir=home / "runs" / "r1")
    command = f"echo ok > made.txt && cat made.txt && cat {home}/settings.json; echo t > /tmp/t"
    result = await harness.one("bash", {"command": command}, home=home)
    assert result.content.startswith("ok\n"), result.content
    assert "No such file or directory" in result.content
    assert SECRET not in result.content
    assert (workspace / "made.txt").read_text() == "ok\n"
    assert (home / "runs" / "r1" / "tmp" / "t").read_text() == "t\n", "/tmp is the run's tmp/"


@needs_bwrap
async def test_a_project_that_contains_openflow_home_still_hides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    home = project / ".openflow"
    home.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps({"api_keys": {SECRET: "t"}}))
    monkeypatch.setenv("OPENFLOW_HOME", str(home))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    harness = Harness(workdir=project, run_dir=run_dir)
    result = await harness.one(
        "bash", {"command": "cat .openflow/settings.json; echo x > top.txt; cat top.txt"}
    )
    assert SECRET not in result.content
    assert result.content.endswith("x\n[exit code 0]"), result.content
    assert (project / "top.txt").read_text() == "x\n"


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


@needs_bwrap
async def test_network_is_a_setting(
    harness: Harness, home: Path, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{listener} && echo connected"
    allowed = await harness.one("bash", {"command": connect}, home=home)
    assert allowed.content == "connected\n[exit code 0]", "network is on by default"
    monkeypatch.setenv("OPENFLOW_TOOL_NETWORK", "off")
    if unavailable(False) is not None:
        pytest.skip(f"no network namespace here: {unavailable(False)}")
    blocked = await harness.one("bash", {"command": connect}, home=home)
    assert blocked.is_error
    assert "connected" not in blocked.content.replace("Connection refused", "")
    assert "Connection refused" in blocked.content, blocked.content


@needs_bwrap
async def test_planted_secrets_never_reach_a_tool_result(
    harness: Harness, home: Path, tmp_path: Path
) -> None:
    """Secrets in settings.json, in another process's environment and outside the folder."""
    (tmp_path / "outside-secret.txt").write_text(SECRET)
    (harness.workdir / "hard").mkdir()
    keeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "PLANTED": SECRET},
    )
    try:
        outside = tmp_path / "outside-secret.txt"
        attempts = [
            ("bash", {"command": f"cat {home}/settings.json {outside}"}),
            ("bash", {"command": f"ln {outside} hard/x; cat hard/x"}),
            ("bash", {"command": f"ln -s {home} h; cat h/settings.json; ls h"}),
            ("bash", {"command": f"cat /proc/{keeper.pid}/environ; cat /proc/*/environ"}),
            ("bash", {"command": f"cat /proc/{keeper.pid}/root{home}/settings.json"}),
            ("bash", {"command": "env; cat /proc/self/environ"}),
            ("bash", {"command": f"find {tmp_path} -name '*.json' 2>&1 | head"}),
            ("read", {"path": "h/settings.json"}),
            ("read", {"path": str(home / "settings.json")}),
            ("search", {"pattern": SECRET[:-1] + ".", "paths": "."}),
            ("find", {"paths": "**/settings.json"}),
            ("ls", {"path": "h"}),
        ]
        outputs = [(await harness.one(tool, args, home=home)).content for tool, args in attempts]
    finally:
        keeper.kill()
        keeper.wait()
    seen = json.dumps([outputs, harness.events, harness.live])
    assert SECRET not in seen
    assert len(outputs) == len(attempts)


def test_without_bubblewrap_bash_is_refused_when_required(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bwrap-here"))
    monkeypatch.setenv("OPENFLOW_TOOL_SANDBOX", "required")
    assert "cannot be confined" in describe()
    import asyncio

    result = asyncio.run(harness.one("bash", {"command": "echo > ran"}))
    assert result.is_error
    assert result.content.startswith(
        "[permission_denied] bash: this worker runs tool processes only when they can be "
        "confined (OPENFLOW_TOOL_SANDBOX=required), and bubblewrap (bwrap) is not installed"
    ), result.content
    assert not (harness.workdir / "ran").exists()
    monkeypatch.setenv("OPENFLOW_TOOL_SANDBOX", "auto")
    assert describe().startswith("tool processes are NOT confined: bubblewrap")
    unconfined = asyncio.run(harness.one("bash", {"command": "echo > ran"}))
    assert not unconfined.is_error
    assert (harness.workdir / "ran").exists()


@needs_bwrap
async def test_a_process_that_leaves_the_group_still_ends_with_the_command(
    harness: Harness, home: Path, pid_alive, wait_until
) -> None:
    pidfile = harness.workdir / "pid"
    result = await harness.one(
        "bash", {"command": f"setsid sleep 300 > /dev/null 2>&1 & echo $! > {pidfile}"}, home=home
    )
    assert result.content == "[no output] [exit code 0]"
    await wait_until(lambda: not pid_alive(int(pidfile.read_text())))


@needs_bwrap
async def test_other_processes_are_out_of_sight(harness: Harness, home: Path) -> None:
    result = await harness.one("bash", {"command": "ls /proc | grep -c '^[0-9]'"}, home=home)
    count = int(result.content.split("\n")[0])
    assert count < 10, f"a confined command sees {count} processes"
