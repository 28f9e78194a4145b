"""`openflow run --detach` and `openflow runs ...` against a real server and worker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from openflow.client import Runs
from openflow.engine.events import Finished
from openflow.testing import write_scripted_settings
from tests.cli.conftest import (
    node,
    openflow,
    wait_state,
    workflow,
    write_workflow,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")


def home_of(env: dict[str, str]) -> Path:
    return Path(env["OPENFLOW_HOME"])


async def test_input_approve_deny_through_the_cli(
    openflow_env: dict[str, str], runs: Runs, tmp_path: Path
) -> None:
    write_scripted_settings(
        home_of(openflow_env),
        {
            "writer": [
                {"ask": "Which file name?"},
                {
                    "tools": [
                        {"name": "write", "args": {"path": "a.txt", "content": "A"}, "id": "w1"}
                    ]
                },
                {
                    "tools": [
                        {"name": "write", "args": {"path": "b.txt", "content": "B"}, "id": "w2"}
                    ]
                },
                {"submit": {"summary": "wrote a.txt"}},
            ]
        },
    )
    path = write_workflow(tmp_path, workflow("writing", node("writer", requestUserInput=True)))

    started = await openflow(
        openflow_env, "run", str(path), "--detach", "--run-id", "run-cli-flow", "--input", "go"
    )
    assert started.code == 0, started.stderr
    assert started.lines == ["run-cli-flow"]
    assert "/namespaces/default/workflows/run-cli-flow" in started.stderr

    await wait_state(runs, "run-cli-flow", lambda s: s.awaiting_node_ids == ["writer"])
    shown = await openflow(openflow_env, "runs", "show", "run-cli-flow")
    assert shown.code == 0, shown.stderr
    assert "status    paused" in shown.stdout
    assert "Writer is waiting for input: Which file name?" in shown.stdout
    assert "openflow runs input run-cli-flow writer TEXT" in shown.stdout

    answered = await openflow(openflow_env, "runs", "input", "run-cli-flow", "writer", "a.txt")
    assert answered.code == 0, answered.stderr

    state = await wait_state(runs, "run-cli-flow", lambda s: s.pending_approvals)
    first = state.pending_approvals[0].approval_id
    approved = await openflow(openflow_env, "runs", "approve", "run-cli-flow", first)
    assert approved.code == 0, approved.stderr

    state = await wait_state(
        runs,
        "run-cli-flow",
        lambda s: any(p.approval_id != first for p in s.pending_approvals),
    )
    second = state.pending_approvals[0].approval_id
    denied = await openflow(
        openflow_env, "runs", "deny", "run-cli-flow", second, "--reason", "only one file"
    )
    assert denied.code == 0, denied.stderr

    await wait_state(runs, "run-cli-flow", lambda s: s.status == "completed")
    workspace = home_of(openflow_env) / "runs" / "run-cli-flow" / "workspace"
    assert (workspace / "a.txt").read_text() == "A"
    assert not (workspace / "b.txt").exists()

    show_json, events_json, listed = await asyncio.gather(
        openflow(openflow_env, "runs", "show", "run-cli-flow", "--json"),
        openflow(openflow_env, "runs", "events", "run-cli-flow", "--json"),
        openflow(openflow_env, "runs", "list"),
    )
    state = show_json.json()
    assert state["status"] == "completed"
    assert state["outputs"]["writer"] == {"summary": "wrote a.txt"}
    events = events_json.json()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    denial = next(e for e in events if e["type"] == "ToolCompleted" and e["tool_call_id"] == "w2")
    assert denial["is_error"] and "Reason: only one file." in denial["content"]
    users = [m["content"] for m in state["chatLogs"]["writer"] if m["role"] == "user"]
    assert "a.txt" in users

    later = await openflow(openflow_env, "runs", "events", "run-cli-flow", "--json", "--after", "3")
    assert [e["seq"] for e in later.json()] == list(range(4, len(events) + 1))
    readable = await openflow(openflow_env, "runs", "events", "run-cli-flow")
    assert readable.lines[0].split()[:2] == ["1", "RunStarted"]
    assert len(readable.lines) == len(events)

    deadline = asyncio.get_running_loop().time() + 20
    while (
        "run-cli-flow" not in listed.stdout.split() and asyncio.get_running_loop().time() < deadline
    ):
        listed = await openflow(openflow_env, "runs", "list")
    line = next(line for line in listed.lines if line.startswith("run-cli-flow "))
    assert line.split()[1] in ("completed", "running")


async def test_retry_stop_and_resume_through_the_cli(
    openflow_env: dict[str, str], runs: Runs, tmp_path: Path
) -> None:
    write_scripted_settings(
        home_of(openflow_env),
        {
            "fragile": [
                {"error": "permanent", "message": "bad key"},
                {"submit": {"summary": "fixed"}},
            ],
            "slow": [
                {"tools": [{"name": "bash", "args": {"command": "sleep 30"}, "id": "call-sleep"}]},
                {"submit": {"summary": "resumed"}},
            ],
        },
        exhausted=None,
    )
    path = write_workflow(
        tmp_path,
        workflow("fragile-flow", node("fragile"), node("slow", tools={"approvalMode": "yolo"})),
    )
    started = await openflow(openflow_env, "run", str(path), "--detach")
    assert started.code == 0, started.stderr
    run_id = started.lines[0]
    assert run_id.startswith("run-")

    await wait_state(runs, run_id, lambda s: s.status_by_node["fragile"] == "failed")
    shown = await openflow(openflow_env, "runs", "show", run_id)
    assert "Fragile failed and waits for a retry: permanent: bad key" in shown.stdout
    assert f"openflow runs retry {run_id} fragile" in shown.stdout
    retried = await openflow(openflow_env, "runs", "retry", run_id, "fragile", "--message", "again")
    assert retried.code == 0, retried.stderr

    await wait_state(runs, run_id, lambda s: s.status_by_node["slow"] == "running_tool")
    stopped = await openflow(openflow_env, "runs", "stop", run_id)
    assert stopped.code == 0, stopped.stderr
    assert await runs.status(run_id) == "stopped"
    stop_again = await openflow(openflow_env, "runs", "stop", run_id)
    assert stop_again.code == 2 and "is not running" in stop_again.stderr

    resumed = await openflow(openflow_env, "runs", "resume", run_id)
    assert resumed.code == 0, resumed.stderr
    state = await wait_state(runs, run_id, lambda s: s.status == "completed")
    assert state.outputs == {"fragile": {"summary": "fixed"}, "slow": {"summary": "resumed"}}
    shown = await openflow(openflow_env, "runs", "show", run_id)
    assert "status    completed" in shown.stdout
    resume_again = await openflow(openflow_env, "runs", "resume", run_id)
    assert resume_again.code == 2 and "completed" in resume_again.stderr


async def test_run_follows_to_completion_and_exits_0(
    openflow_env: dict[str, str], runs: Runs, tmp_path: Path
) -> None:
    write_scripted_settings(
        home_of(openflow_env),
        {"first": [{"submit": {"summary": "one"}}], "second": [{"submit": {"summary": "two"}}]},
    )
    path = write_workflow(tmp_path, workflow("pair", node("first"), node("second")))
    result = await openflow(openflow_env, "run", str(path), "--input", "go")
    assert result.code == 0, result.stderr
    assert "First completed" in result.stdout
    assert "Second completed" in result.stdout
    assert "run completed" in result.stdout
    assert "/namespaces/default/workflows/run-" in result.stdout


async def test_run_without_a_terminal_stops_at_a_pause_and_says_how_to_answer(
    openflow_env: dict[str, str], runs: Runs, tmp_path: Path
) -> None:
    write_scripted_settings(home_of(openflow_env), {"ask": [{"ask": "Which colour?"}]})
    path = write_workflow(tmp_path, workflow("colour", node("ask", requestUserInput=True)))
    result = await openflow(openflow_env, "run", str(path), "--run-id", "run-cli-paused")
    assert result.code == 0, result.stderr
    assert "Which colour?" in result.stdout
    assert "openflow runs input run-cli-paused ask TEXT" in result.stdout
    assert await runs.status("run-cli-paused") == "paused"
    duplicate = await openflow(openflow_env, "run", str(path), "--run-id", "run-cli-paused")
    assert duplicate.code == 2
    assert "already exists" in duplicate.stderr


async def test_run_that_fails_exits_1(
    openflow_env: dict[str, str], runs: Runs, tmp_path: Path
) -> None:
    (home_of(openflow_env) / "settings.json").write_text(
        json.dumps(
            {
                "active_provider": "scripted",
                "providers": {"scripted": {"kind": "scripted", "default_model": "", "script": {}}},
            }
        )
    )
    path = write_workflow(tmp_path, workflow("no-model", node("blank", model="")))
    result = await openflow(openflow_env, "run", str(path))
    assert result.code == 1, (result.stdout, result.stderr)
    assert "has no model configured" in result.stdout
    assert "failed" in result.stdout.splitlines()[-1]


async def test_the_follower_shows_the_post_run_reviews_suggestions() -> None:
    import io

    from rich.console import Console

    from openflow.cli.follow import Renderer

    out = io.StringIO()
    renderer = Renderer(Console(file=out, width=200, color_system=None))
    suggestion = {
        "id": "suggestion-1",
        "category": "tools",
        "target_node_id": "look",
        "title": "Read once",
        "evidence": "the file was read twice",
        "recommendation": "List first, then read what you need.",
    }
    renderer.event(
        Finished.model_validate(
            {"seq": 9, "report": {"workflow_id": "w", "suggestions": [suggestion]}}
        )
    )
    text = out.getvalue()
    assert "suggestion [tools] (look): Read once — List first, then read what you need." in text
    assert text.rstrip().endswith("■ run completed")


async def test_interrupt_retry_and_revert_through_the_cli(
    openflow_env: dict[str, str], runs: Runs, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("before\n")
    write = {"name": "write", "args": {"path": "a.txt", "content": "after\n"}, "id": "call-w"}
    write_scripted_settings(
        home_of(openflow_env),
        {
            "slow": [
                {"tools": [{"name": "bash", "args": {"command": "sleep 30"}, "id": "call-sleep"}]},
                {"tools": [write]},
                {"ask": "More?"},
                {"submit": {"summary": "done"}},
            ]
        },
        exhausted=None,
    )
    wf = workflow("slow-flow", node("slow", requestUserInput=True, tools={"approvalMode": "yolo"}))
    path = write_workflow(tmp_path, wf)
    started = await openflow(openflow_env, "run", str(path), "--detach", "--project", str(project))
    assert started.code == 0, started.stderr
    run_id = started.lines[0]
    await wait_state(runs, run_id, lambda s: s.status_by_node["slow"] == "running_tool")
    interrupted = await openflow(openflow_env, "runs", "interrupt", run_id, "slow")
    assert interrupted.code == 0, interrupted.stderr
    await wait_state(runs, run_id, lambda s: s.status_by_node["slow"] == "interrupted")
    again = await openflow(openflow_env, "runs", "interrupt", run_id, "slow")
    assert again.code == 2 and len(again.stderr.splitlines()) == 1
    assert "already interrupted" in again.stderr
    retried = await openflow(openflow_env, "runs", "retry", run_id, "slow", "--message", "go")
    assert retried.code == 0, retried.stderr
    state = await wait_state(runs, run_id, lambda s: s.awaiting_node_ids == ["slow"])
    (batch,) = state.edit_batches
    assert (project / "a.txt").read_text() == "after\n"
    reverted = await openflow(openflow_env, "runs", "revert", run_id, batch.batch_id)
    assert reverted.code == 0 and "restored a.txt" in reverted.stdout, reverted.stderr
    assert (project / "a.txt").read_text() == "before\n"
    unknown = await openflow(openflow_env, "runs", "revert", run_id, batch.batch_id)
    assert unknown.code == 2 and "no edit batch" in unknown.stderr
    idle = await openflow(openflow_env, "runs", "interrupt", run_id, "slow")
    assert idle.code == 2 and "waits for input" in idle.stderr
    await openflow(openflow_env, "runs", "input", run_id, "slow", "no")
    assert (await wait_state(runs, run_id, lambda s: s.status == "completed")).status
