"""Bad input anywhere in `openflow`: exit 2 and one line saying what to fix, never a traceback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from openflow.cli import main
from openflow.server import EmbeddedServer, free_port
from tests.cli.conftest import (
    Result,
    assert_one_line_error,
    node,
    openflow,
    workflow,
    write_workflow,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

RUN_ACTIONS = [
    ["runs", "show", "run-nope"],
    ["runs", "show", "run-nope", "--json"],
    ["runs", "events", "run-nope", "--json"],
    ["runs", "input", "run-nope", "ask", "hello"],
    ["runs", "approve", "run-nope", "approval-1"],
    ["runs", "deny", "run-nope", "approval-1", "--reason", "no"],
    ["runs", "retry", "run-nope", "plan", "--message", "again"],
    ["runs", "message", "run-nope", "plan", "hello"],
    ["runs", "stop", "run-nope"],
    ["runs", "resume", "run-nope"],
    ["runs", "resume", "run-nope", "--message", "plan", "go on"],
    ["runs", "interrupt", "run-nope", "plan"],
    ["runs", "revert", "run-nope", "batch-1"],
]


async def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """Run `openflow ARGS` in this process (on a thread, so commands may start their own loop)."""
    code = await asyncio.to_thread(main, list(args))
    out, err = capsys.readouterr()
    return Result(code, out, err)


async def test_commands_in_a_subprocess_fail_in_one_line(
    tmp_path: Path, temporal_server: EmbeddedServer
) -> None:
    good = write_workflow(tmp_path, workflow("solo", node("solo")))
    nowhere = {
        "OPENFLOW_HOME": str(tmp_path),
        "OPENFLOW_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
    }
    server = {**nowhere, "OPENFLOW_TEMPORAL_ADDRESS": temporal_server.address}
    cases = [
        (nowhere, ["runs", "list"], "cannot reach Temporal at"),
        (nowhere, ["run", str(good), "--detach"], "openflow server"),
        (nowhere, ["worker"], "cannot reach Temporal at"),
        (server, ["runs", "show", "run-nope"], "no run 'run-nope'"),
        (server, ["run", str(tmp_path / "missing.workflow.json")], "no such file"),
        (server, ["runs"], "required"),
        ({**nowhere, "OPENFLOW_TOOL_BUDGET": "-3"}, ["worker"], "OPENFLOW_TOOL_BUDGET='-3'"),
        (nowhere, ["run", str(good), "--bogus"], "unrecognized arguments: --bogus"),
    ]
    results = await asyncio.gather(*(openflow(env, *args) for env, args, _ in cases))
    for (_, _, expected), result in zip(cases, results, strict=True):
        assert_one_line_error(result, expected)


async def test_every_command_without_a_server_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("OPENFLOW_TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
    good = write_workflow(tmp_path, workflow("solo", node("solo")))
    for args in [["runs", "list"], ["run", str(good)], *RUN_ACTIONS]:
        result = await in_process(capsys, *args)
        assert_one_line_error(result, "cannot reach Temporal at", "openflow server")


async def test_unknown_run_is_one_line_for_every_action(
    openflow_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    for args in RUN_ACTIONS:
        result = await in_process(capsys, *args)
        assert_one_line_error(result, "no run 'run-nope'", "openflow runs list")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "missing.workflow.json"], "no such file"),
        (["run", "."], "is a folder"),
        (["run", "{broken}", "--detach"], "cycle"),
        (["run", "{good}", "--project", "no-such-folder"], "--project"),
        (["run", "{good}", "--run-id", " "], "--run-id"),
        (["runs", "events", "run-x", "--after", "-1"], "--after"),
        (["runs", "list", "--status", "sleeping"], "invalid choice"),
        (["runs", "input", "run-x"], "required"),
        (["runs"], "required"),
        (["server", "--ui-port", "0"], "--ui-port"),
        (["api", "--port", "70000"], "--port"),
        (["dev", "--api-port", "-5"], "--api-port"),
        (["demo", "--ui-port", "99999"], "--ui-port"),
        (["nonsense"], "invalid choice"),
        # ports and numbers
        (["api", "--port", "eighty"], "invalid int value"),
        (["api", "--port", "0"], "--port"),
        (["api", "--port", "-1"], "--port"),
        (["server", "--ui-port", "1.5"], "invalid int value"),
        (["dev", "--ui-port", "65536"], "--ui-port"),
        (["runs", "events", "run-x", "--after", "x"], "invalid int value"),
        (["runs", "events", "run-x", "--after", str(2**64)], "--after"),
        # hosts
        (["api", "--host", "not a host!"], "--host 'not a host!'"),
        (["api", "--host", ""], "--host is empty"),
        (["api", "--host", "h" * 300], "--host"),
        (["api", "--host", "192.0.2.1", "--port", "8123"], "cannot listen on '192.0.2.1'"),
        (["dev", "--api-host", "nowhere.invalid"], "--api-host 'nowhere.invalid'"),
        # paths
        (["validate", "missing.workflow.json"], "no such file"),
        (["validate", "."], "is a folder"),
        (["validate", "/dev/zero"], "over the limit max_workflow_file_bytes"),
        (["run", "{good}", "--project", "{good}"], "--project"),
        (["run", "{good}", "--input-file", "missing.txt"], "--input-file missing.txt"),
        (["run", "{good}", "--input-file", "."], "is a folder"),
        # ids and texts
        (["run", "{good}", "--run-id", "../escape"], "--run-id"),
        (["run", "{good}", "--run-id", "x" * 200], "--run-id"),
        (["runs", "show", ""], "ID is empty"),
        (["runs", "show", "run\x07bell"], "ID is not an id"),
        (["runs", "input", "run-x", " ", "hi"], "NODE is empty"),
        (["runs", "approve", "run-x", "a" * 1001], "APPROVAL is not an id"),
        (["runs", "input", "run-x", "ask", "x" * 70_000], "max_message_bytes"),
        (["runs", "retry", "run-x", "ask", "--message", "x" * 70_000], "--message"),
        (["runs", "resume", "run-x", "--message", "ask", "x" * 70_000], "--message"),
        (["runs", "resume", "run-x", "--message", " ", "hi"], "--message takes a node id"),
        (["runs", "resume", "run-x", "--message", "ask"], "expected 2 arguments"),
        (["runs", "interrupt", "run-x", ""], "NODE is empty"),
        (["runs", "revert", "run-x", ""], "BATCH_ID is empty"),
        (["runs", "deny", "run-x", "ap-1", "--reason", "x" * 70_000], "--reason"),
        # unknown flags
        (["--bogus"], "unrecognized option '--bogus'"),
        (["-x", "validate", "f"], "unrecognized option '-x'"),
        (["validate", "{good}", "--bogus"], "unrecognized arguments: --bogus"),
        (["runs", "list", "--colour"], "unrecognized arguments: --colour"),
        (["runs", "list", "--workflow", ""], "--workflow is empty"),
    ],
)
async def test_bad_arguments_are_one_line(
    args: list[str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("OPENFLOW_TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
    good = write_workflow(tmp_path, workflow("solo", node("solo")))
    broken = write_workflow(tmp_path, workflow("loop", node("a"), node("b")))
    loop = broken.read_text().replace(
        '"edges": [', '"edges": [{"id": "b-a", "from": "b", "to": "a"},'
    )
    broken.write_text(loop)
    argv = [a.replace("{good}", str(good)).replace("{broken}", str(broken)) for a in args]
    result = await in_process(capsys, *argv)
    assert_one_line_error(result, expected)


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("OPENFLOW_TOOL_BUDGET", "lots", "OPENFLOW_TOOL_BUDGET='lots'"),
        ("OPENFLOW_TOOL_BUDGET", "0", "from 1 to 1024"),
        ("OPENFLOW_TOOL_BUDGET", "99999", "from 1 to 1024"),
        ("OPENFLOW_WORKFLOW_SANDBOX", "maybe", "OPENFLOW_WORKFLOW_SANDBOX='maybe'"),
        ("OPENFLOW_HOME", "{file}", "is a file, not a folder"),
        ("OPENFLOW_TASK_QUEUE", "   ", "OPENFLOW_TASK_QUEUE"),
        ("OPENFLOW_TASK_QUEUE", "queue\x01", "printable"),
        ("OPENFLOW_UI_URL", "ftp://ui.example", "OPENFLOW_UI_URL: is not an http(s) URL"),
        ("OPENFLOW_UI_URL", "http://ui.example:port", "port that is not a number"),
        ("OPENFLOW_SCRIPT", "{missing}", "OPENFLOW_SCRIPT"),
    ],
)
@pytest.mark.parametrize("command", [["validate", "{good}"], ["runs", "list"]])
async def test_bad_environment_values_are_one_line_before_anything_runs(
    variable: str,
    value: str,
    expected: str,
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good = write_workflow(tmp_path, workflow("solo", node("solo")))
    monkeypatch.setenv("OPENFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("OPENFLOW_TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
    monkeypatch.setenv(
        variable, value.replace("{file}", str(good)).replace("{missing}", str(tmp_path / "no"))
    )
    result = await in_process(capsys, *(arg.replace("{good}", str(good)) for arg in command))
    assert_one_line_error(result, expected)


async def test_an_empty_variable_counts_as_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write_workflow(tmp_path, workflow("solo", node("solo")))
    monkeypatch.setenv("OPENFLOW_HOME", str(tmp_path))
    for variable in ("OPENFLOW_TOOL_BUDGET", "OPENFLOW_UI_URL", "OPENFLOW_SCRIPT"):
        monkeypatch.setenv(variable, "")
    monkeypatch.setenv("OPENFLOW_WORKFLOW_SANDBOX", "on")
    result = await in_process(capsys, "validate", str(good))
    assert (result.code, result.stdout, result.stderr) == (0, "ok\n", "")


async def test_rejected_action_on_a_live_run_is_one_line(
    openflow_env: dict[str, str], tmp_path: Path, runs: object
) -> None:
    from openflow.testing import write_scripted_settings

    write_scripted_settings(Path(openflow_env["OPENFLOW_HOME"]), {"ask": [{"ask": "Name?"}]})
    path = write_workflow(tmp_path, workflow("asker", node("ask", requestUserInput=True)))
    started = await openflow(openflow_env, "run", str(path), "--detach")
    assert started.code == 0, started.stderr
    run_id = started.lines[0]
    wrong_node, wrong_approval = await asyncio.gather(
        openflow(openflow_env, "runs", "input", run_id, "nobody", "hi"),
        openflow(openflow_env, "runs", "approve", run_id, "approval-404"),
    )
    assert_one_line_error(wrong_node, "unknown node 'nobody'")
    assert_one_line_error(wrong_approval, "no pending approval 'approval-404'")
    stop = await openflow(openflow_env, "runs", "stop", run_id)
    assert stop.code == 0, stop.stderr
    again = await openflow(openflow_env, "runs", "input", run_id, "ask", "late")
    assert_one_line_error(again, "resume it first")
