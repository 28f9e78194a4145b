"""Crashes, stops and long runs: what must survive, what must never happen twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter

from openflow.client import Runs
from openflow.contracts import RunResult
from openflow.server import EmbeddedServer, free_port
from openflow.testing import write_scripted_settings
from openflow.worker import build_worker
from openflow.workflows import run as run_module
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")
ROOT = Path(__file__).resolve().parents[2]


async def _poll(predicate, timeout: float = 30.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s")


async def test_cancel_during_slow_bash_stops_then_resume_completes(harness: Harness) -> None:
    harness.script(
        {
            "slow": [
                {"tools": [{"name": "bash", "args": {"command": "sleep 30"}, "id": "call-sleep"}]},
                {"submit": {"summary": "resumed"}},
            ]
        }
    )
    wf = make_workflow([node("slow", tools={"approvalMode": "yolo"})], [])
    run_id = await harness.start(wf)
    await harness.wait_for(run_id, lambda s: s.status_by_node["slow"] == "running_tool")
    await harness.handle(run_id).cancel()
    result = await harness.result(run_id)
    assert result.status == "stopped"
    events = await harness.events(run_id)
    done = [e for e in events if e.type == "ToolCompleted" and e.tool_call_id == "call-sleep"]
    assert len(done) == 1 and "interrupted or cancelled" in done[0].content
    assert [e.type for e in events].count("Aborted") == 1
    state = await harness.state(run_id)
    assert state.status == "stopped"
    await harness.replay(run_id)

    await harness.runs.resume(run_id)
    result = await harness.result(run_id)
    assert result.status == "completed"
    assert result.outputs["slow"] == {"summary": "resumed"}
    events = await harness.runs.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert any(e.type == "RunResumed" for e in events)
    # Small runs take their events along: a plain query still answers from seq 1.
    assert await harness.events(run_id) == events
    await harness.replay(run_id)


async def test_engine_fault_fails_the_run_instead_of_hanging(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.script({"a": [{"ask": "anything?"}]})
    real_advance = run_module.engine.advance

    def faulty(snapshot, facts, now_ms, **options):  # type: ignore[no-untyped-def]
        if any(getattr(f, "kind", "") == "input" for f in facts):
            raise KeyError("injected fault")
        return real_advance(snapshot, facts, now_ms, **options)

    monkeypatch.setattr(run_module.engine, "advance", faulty)
    wf = make_workflow([node("a", requestUserInput=True)], [])
    run_id = await harness.start(wf)
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["a"])
    await harness.handle(run_id).signal("submit_user_input", {"node_id": "a", "text": "x"})
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(harness.handle(run_id).result(), 30)
    assert "engine fault" in str(failed.value.cause)
    desc = await harness.handle(run_id).describe()
    assert desc.status == WorkflowExecutionStatus.FAILED


async def test_bug_outside_the_engine_fails_the_run(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.script({})

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise TypeError("injected bug at start")

    monkeypatch.setattr(run_module.engine, "start", broken)
    run_id = await harness.start(make_workflow([node("a")], []))
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(harness.handle(run_id).result(), 30)


async def test_a_short_run_continued_as_new_answers_every_event_itself(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_module, "HISTORY_EVENTS_LIMIT", 40)
    turns = [{"tools": [{"name": "ls", "args": {"path": "."}}]} for _ in range(8)]
    harness.script({"busy": [*turns, {"submit": {"summary": "done"}}]})
    run_id = await harness.start(make_workflow([node("busy")], []))
    first = (await harness.handle(run_id).describe()).run_id
    assert (await harness.result(run_id)).status == "completed"
    assert (await harness.handle(run_id).describe()).run_id != first
    own = await harness.events(run_id)
    assert [e.seq for e in own] == list(range(1, len(own) + 1))
    assert sum(1 for e in own if e.type == "ToolCompleted") == 8


async def test_long_run_continues_as_new_and_keeps_its_events(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_module, "HISTORY_EVENTS_LIMIT", 40)
    monkeypatch.setattr("openflow.workflows.journal.CARRY_EVENTS_BYTES", 0)
    monkeypatch.setattr("openflow.engine.compact.KEEP_RECENT", 4)
    turns = [{"tools": [{"name": "ls", "args": {"path": "."}}]} for _ in range(12)]
    harness.script({"busy": [*turns, {"submit": {"summary": "done"}}]})
    wf = make_workflow([node("busy")], [])
    run_id = await harness.start(wf)
    first = (await harness.handle(run_id).describe()).run_id
    result = await harness.result(run_id)
    assert result.status == "completed"
    last = (await harness.handle(run_id).describe()).run_id
    assert last != first, "the run never continued as new"
    own = await harness.events(run_id)
    assert own[0].seq > 1, "the last execution holds only its own events"
    events = await harness.runs.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert sum(1 for e in events if e.type == "ToolCompleted") == 12
    later = await harness.runs.events(run_id, after=5)
    assert [e.seq for e in later] == list(range(6, len(events) + 1))
    state = await harness.state(run_id)
    assert state.status == "completed"
    assert state.status_by_node["busy"] == "completed"
    # The carried snapshot dropped old transcript items; the run store still has every one.
    stored = (harness.home / "runs" / run_id / "transcripts" / "busy.jsonl").read_text()
    items = [json.loads(line) for line in stored.splitlines()]
    calls = [i["call"]["name"] for i in items if i["kind"] == "tool_call"]
    # Every listing with its result, then the reply that submitted the output.
    assert calls == ["ls"] * 12 + ["openflow_submit_node_output"]
    assert sum(1 for i in items if i["kind"] == "tool_result") == 12


def _node_turn(event: Any) -> bool:
    """Whether a history event schedules one of a node's model turns (not the post-run review)."""
    if not event.HasField("activity_task_scheduled_event_attributes"):
        return False
    attrs = event.activity_task_scheduled_event_attributes
    summary = json.loads(event.user_metadata.summary.data or b'""')
    return attrs.activity_type.name == "model_turn" and summary != "post-run review"


def _spawn_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workflows.worker_main"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert b"worker ready" in line, line
    return proc


KILL_POINTS = {
    # The worker dies while the model decides on the write: the batch runs once, afterwards.
    "model-turn-before-write": {
        "turns": [
            {
                "tools": [
                    {"name": "bash", "args": {"command": "echo line >> {ledger}"}, "id": "call-w"}
                ],
                "delay_ms": 3000,
            },
            {"submit": {"summary": "survived"}},
        ],
        "kill_when": "started",
        "unknown": [],
    },
    # The worker dies while the write runs: never sent again, the model is told it is unknown.
    "mid-write": {
        "turns": [
            {
                "tools": [
                    {
                        "name": "bash",
                        "args": {"command": "echo line >> {ledger}; sleep 8; echo end >> {ledger}"},
                        "id": "call-w",
                    }
                ]
            },
            {"submit": {"summary": "survived"}},
        ],
        "kill_when": "ledger",
        "unknown": ["call-w"],
    },
    # The worker dies in the model turn after the write: the write is not repeated.
    "model-turn-after-write": {
        "turns": [
            {
                "tools": [
                    {"name": "bash", "args": {"command": "echo line >> {ledger}"}, "id": "call-w"}
                ]
            },
            {"submit": {"summary": "survived"}, "delay_ms": 3000},
        ],
        "kill_when": "completed-tool",
        "unknown": [],
    },
}


def _fill(value: Any, ledger: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{ledger}", str(ledger))
    if isinstance(value, list):
        return [_fill(v, ledger) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, ledger) for k, v in value.items()}
    return value


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
async def test_kill_worker_mid_run_no_side_effect_repeats(
    client: Client,
    task_queue: str,
    openflow_home: Path,
    openflow_env: dict[str, str],
    point: str,
) -> None:
    case = KILL_POINTS[point]
    ledger = openflow_home / "ledger.txt"
    write_scripted_settings(openflow_home, {"work": _fill(case["turns"], ledger)})
    wf = make_workflow([node("work", tools={"approvalMode": "yolo"})], [])
    first = _spawn_worker(openflow_env)
    second = None
    runs = Runs(client, task_queue)
    try:
        run_id = await runs.start(wf, entrypoint="go", project_dir=str(openflow_home))

        async def ready() -> bool:
            if case["kill_when"] == "ledger":
                return ledger.exists() and "line" in ledger.read_text()
            state = await runs.state(run_id)
            done = any(
                row.status == "completed" for row in state.tool_calls_by_node.get("work", [])
            )
            if case["kill_when"] == "completed-tool" and not done:
                return False
            return state.status_by_node.get("work") == "started"

        await _poll_async(ready, what=f"kill point {point}")
        await asyncio.sleep(0.3)
        started = asyncio.get_running_loop().time()
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = _spawn_worker(openflow_env)
        raw = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
        result = RunResult.model_validate(raw)
        assert result.status == "completed"
        # Past the moment a killed batch would have written "end": it died with its worker.
        await asyncio.sleep(max(0.0, started + 9 - asyncio.get_running_loop().time()))
        assert ledger.read_text().split() == ["line"], "a side effect ran twice or not at all"
        events = await runs.events(run_id)
        unknown = [e.tool_call_id for e in events if e.type == "ToolOutcomeUnknown"]
        assert unknown == case["unknown"]
        done = [e for e in events if e.type == "ToolCompleted" and e.tool_call_id == "call-w"]
        assert len(done) == 1
        assert ("outcome unknown, not re-sent" in done[0].content) == bool(case["unknown"])
        history = await client.get_workflow_handle(run_id).fetch_history()
        scheduled = {e.event_id: _node_turn(e) for e in history.events}
        completed = [
            scheduled[e.activity_task_completed_event_attributes.scheduled_event_id]
            for e in history.events
            if e.HasField("activity_task_completed_event_attributes")
        ]
        assert completed.count(True) == 2, "a completed model turn of the node ran again"
        await Harness(client, task_queue, openflow_home).replay(run_id)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


async def _poll_async(predicate, timeout: float = 30.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            if await predicate():
                return
        except Exception:  # noqa: BLE001 - the run may not have answered its first query yet
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s")


async def test_server_restart_mid_run_completes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    address = f"127.0.0.1:{free_port()}"
    ui = free_port()
    write_scripted_settings(
        home,
        {"a": [{"ask": "continue?"}, {"submit": {"summary": "after restart"}}]},
    )
    server = EmbeddedServer(home, address=address, ui_port=ui)
    await server.start()
    try:
        client = await server.connect(data_converter=pydantic_data_converter)
        runs = Runs(client, "restart-queue")
        async with build_worker(client, "restart-queue", home):
            run_id = await runs.start(make_workflow([node("a", requestUserInput=True)], []))
            await _poll_state(runs, run_id, lambda s: s.awaiting_node_ids == ["a"])
        await server.stop()
        await server.start()
        client = await server.connect(data_converter=pydantic_data_converter)
        runs = Runs(client, "restart-queue")
        async with build_worker(client, "restart-queue", home):
            await runs.act(run_id, _input("a", "yes"))
            raw = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
        assert RunResult.model_validate(raw).status == "completed"
        await Harness(client, "restart-queue", home).replay(run_id)
    finally:
        await server.stop()


def _input(node_id: str, text: str):  # type: ignore[no-untyped-def]
    from openflow.contracts import Action

    return Action(kind="input", node_id=node_id, text=text)


async def _poll_state(runs: Runs, run_id: str, predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            if predicate(await runs.state(run_id)):
                return
        except Exception:  # noqa: BLE001 - the first workflow task may not have run yet
            pass
        await asyncio.sleep(0.05)
    raise AssertionError("state condition not reached")


async def test_resume_a_run_stopped_at_an_input_pause_shows_the_pause(harness: Harness) -> None:
    harness.script({"ask": [{"ask": "Which colour?"}, {"echo": True}]})
    run_id = await harness.start(make_workflow([node("ask", requestUserInput=True)], []))
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    await harness.handle(run_id).cancel()
    assert (await harness.result(run_id)).status == "stopped"
    await harness.runs.resume(run_id)
    state = await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    assert state.status == "paused"
    assert state.status_by_node["ask"] == "awaiting_input"
    await harness.runs.act(run_id, _input("ask", "blue"))
    result = await harness.result(run_id)
    assert result.status == "completed"
    await harness.replay(run_id)


async def test_lost_header_blobs_are_resent_from_history(harness: Harness) -> None:
    harness.script(
        {
            "work": [
                {
                    "tools": [{"name": "bash", "args": {"command": "sleep 1"}}],
                    "say": "Checking the folder first.",
                },
                {"submit": {"summary": "done"}},
            ]
        }
    )
    wf = make_workflow([node("work", tools={"approvalMode": "yolo"})], [])
    run_id = await harness.start(wf)
    await harness.wait_for(run_id, lambda s: s.status_by_node["work"] == "running_tool")
    # Request headers are unsynced caches of history (a machine crash may lose them).
    headers = harness.home / "runs" / run_id / "headers"
    lost = list(headers.rglob("*.json"))
    assert lost
    for blob in lost:
        blob.unlink()
    result = await harness.result(run_id)
    assert result.status == "completed"
    transcript = (harness.home / "runs" / run_id / "transcripts" / "work.jsonl").read_text()
    assert "Checking the folder first." in transcript
    events = await harness.events(run_id)
    assert not [e for e in events if e.type in ("NodeErrored", "NodeFailed")]
    assert [e.model_attempt for e in events if e.type == "NodeStarted"] == [1]
    history = await harness.handle(run_id).fetch_history()
    model_turns = [e for e in history.events if _node_turn(e)]
    assert len(model_turns) == 3, "the call that found its references missing was not resent"
    await harness.replay(run_id)


async def test_a_decision_recorded_while_no_worker_runs_sends_each_allowed_call_once(
    client: Client, task_queue: str, openflow_home: Path, openflow_env: dict[str, str]
) -> None:
    """The worker dies at the approval pause; the per-call decision lands in history with no
    worker alive; the next worker sends the allowed and edited calls once, never the denied."""
    ledger = openflow_home / "ledger.txt"
    echo = [
        {"name": "bash", "args": {"command": f"echo {w} >> {ledger}"}, "id": f"call-{w}"}
        for w in ("a", "b", "c")
    ]
    write_scripted_settings(
        openflow_home, {"work": [{"tools": echo}, {"submit": {"summary": "survived"}}]}
    )
    wf = make_workflow([node("work")], [])
    first = _spawn_worker(openflow_env)
    second = None
    runs = Runs(client, task_queue)
    try:
        run_id = await runs.start(wf, entrypoint="go", project_dir=str(openflow_home))

        async def paused() -> bool:
            return bool((await runs.state(run_id)).pending_approvals)

        await _poll_async(paused, what="the approval pause")
        approval = (await runs.state(run_id)).pending_approvals[0].approval_id
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        decision = {
            "approval_id": approval,
            "decisions": [
                {"call_id": "call-a", "allow": True},
                {"call_id": "call-b", "allow": False, "reason": "not b"},
                {
                    "call_id": "call-c",
                    "allow": True,
                    "arguments": {"command": f"echo C >> {ledger}"},
                },
            ],
            "by": "Ada",
        }
        handle = client.get_workflow_handle(run_id)
        await handle.signal("submit_tool_approval", decision)
        assert not ledger.exists(), "nothing runs while no worker is alive"
        second = _spawn_worker(openflow_env)
        raw = await asyncio.wait_for(handle.result(), 60)
        assert RunResult.model_validate(raw).status == "completed"
        assert sorted(ledger.read_text().split()) == ["C", "a"], "a call ran twice or not at all"
        history = await handle.fetch_history()
        batches = [
            e
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == "tool_batch"
        ]
        assert len(batches) == 1
        events = await runs.events(run_id)
        denied = [(e.tool_call_id, e.by) for e in events if e.type == "ToolDenied"]
        assert denied == [("call-b", "Ada")]
        await Harness(client, task_queue, openflow_home).replay(run_id)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
