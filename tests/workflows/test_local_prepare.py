"""A new run prepares in a local activity: its first workflow task runs the start on its own
worker and schedules the first model call in the same completion."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.history import LOCAL_ACTIVITY_MARKER, breakdown
from openflow import contracts as c
from openflow.activities import prepare_run
from openflow.activities.lru import Lru
from openflow.activities.tools_runner import default_tools, tool_specs
from openflow.worker import build_worker
from tests.workflows.conftest import Harness, make_workflow, node

session_loop = pytest.mark.asyncio(loop_scope="session")


def _local_markers(history: Any) -> list[Any]:
    return [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER
    ]


def _scheduled(history: Any, activity_type: str) -> list[Any]:
    return [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    ]


@session_loop
async def test_a_new_run_prepares_and_calls_its_model_in_its_first_task(harness: Harness) -> None:
    harness.script({}, exhausted="echo")
    run_id = await harness.start(make_workflow([node("a"), node("b")], [("a", "b")]))
    result = await harness.result(run_id)
    assert result.status == "completed", result
    history = await harness.handle(run_id).fetch_history()
    # No activity of its own for the start: one local activity's marker holds its outcome.
    assert not _scheduled(history, c.ACTIVITY_PREPARE)
    (marker,) = _local_markers(history)
    data = json.loads(marker.marker_recorded_event_attributes.details["data"].payloads[0].data)
    assert data["activity_type"] == c.ACTIVITY_PREPARE
    # The first task's completion records it and schedules the first model turn.
    first_task = next(
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )
    assert marker.marker_recorded_event_attributes.workflow_task_completed_event_id == first_task
    first_turn = _scheduled(history, c.ACTIVITY_MODEL_TURN)[0]
    assert first_turn.activity_task_scheduled_event_attributes.workflow_task_completed_event_id == (
        first_task
    )
    # Its result names the header parts' set and the worker's own tools, each in a few bytes.
    ((_, size, prepared),) = breakdown(history).of("prepare_run result")
    assert "header_parts" not in prepared and len(prepared["header_parts_digest"]) == 16
    assert prepared["tool_names"][0].startswith("@") and size < 400
    await harness.replay(run_id)


@session_loop
async def test_a_start_that_cannot_prepare_fails_at_once_saying_what_to_fix(
    harness: Harness,
) -> None:
    harness.script({}, exhausted="echo")
    wf = make_workflow([node("a", providerId="nowhere")], [])
    run_id = await harness.start(wf)
    result = await harness.result(run_id, timeout=20)
    assert result.status == "failed", result
    assert "provider 'nowhere' is not configured: add it to settings.json" in (result.error or "")
    history = await harness.handle(run_id).fetch_history()
    # Failed for good in its first task: not tried again elsewhere.
    assert len(_local_markers(history)) == 1 and not _scheduled(history, c.ACTIVITY_PREPARE)
    await harness.replay(run_id)


@session_loop
async def test_a_start_that_fails_here_for_a_while_moves_on_to_any_worker(
    harness: Harness, tmp_path: Path
) -> None:
    harness.script({}, exhausted="echo")
    project = tmp_path / "mounted-later"
    run_id = await harness.start(make_workflow([node("a")], []), project_dir=str(project))
    # The project folder is not visible here: the start's tries in the workflow's task fail,
    # and it goes on as an activity of its own, which the folder, mounted now, lets pass.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not _scheduled(await harness.handle(run_id).fetch_history(), c.ACTIVITY_PREPARE):
        assert loop.time() < deadline, "the start never moved on to an activity"
        await asyncio.sleep(0.05)
    project.mkdir()
    result = await harness.result(run_id, timeout=30)
    assert result.status == "completed", result
    history = await harness.handle(run_id).fetch_history()
    (marker,) = _local_markers(history)
    assert "failure" in marker.marker_recorded_event_attributes
    # The folder is the project's: the result leaves it out, the run still knows it.
    assert (await harness.state(run_id)).execution_cwd == str(project)
    await harness.replay(run_id)


@session_loop
async def test_a_worker_that_takes_a_run_over_still_sends_headers_by_reference(
    client: Client, task_queue: str, openflow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(client, task_queue, openflow_home)
    harness.script({"ask": [{"ask": "Which one?"}, {"submit": {"summary": "that one"}}]})
    wf = make_workflow([node("ask", requestUserInput=True), node("next")], [("ask", "next")])
    async with build_worker(client, task_queue, openflow_home):
        run_id = await harness.start(wf)
        await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["ask"])
    # A new worker process: it knows nothing of what the start on the first one worked out.
    monkeypatch.setattr(prepare_run, "_FORETOLD", Lru(prepare_run._FORETOLD.limit))
    async with build_worker(client, task_queue, openflow_home):
        await harness.handle(run_id).signal(c.SIGNAL_INPUT, {"node_id": "ask", "text": "this"})
        result = await harness.result(run_id)
    assert result.status == "completed", result
    history = await harness.handle(run_id).fetch_history()
    turns = [v for _, _, v in breakdown(history).of("model_turn input")]
    later = [v for v in turns if c.call_node(v["call_id"]) == "next"]
    assert later and all(v.get("header_set") and "header" not in v for v in later)


def test_results_recorded_before_keep_their_parts_and_tools() -> None:
    old = {
        "profiles": {"scripted": {"kind": "scripted"}},
        "active_provider": "scripted",
        "tool_names": ["bash", "read"],
        "execution_dir": "/w/runs/r1/workspace",
        "header_parts": ["10f041526d4a88a1", "16dfd1c0f12e3b7b"],
    }
    result = c.PrepareResult.model_validate_json(json.dumps(old))
    assert result.tool_names == ["bash", "read"]
    assert result.execution_dir == old["execution_dir"]
    assert json.loads(result.model_dump_json())["tool_names"] == ["bash", "read"]
    snapshot: Any = None  # a listed set needs no foretelling
    assert prepare_run.stored_parts(result, snapshot) == set(old["header_parts"])


def test_the_workers_own_tools_are_a_known_set() -> None:
    """Adding a tool to the worker: add its set to `contracts.TOOL_SETS` under a new name."""
    names = sorted(tool_specs(default_tools()))
    assert frozenset(names) in c.TOOL_SETS.values()
    result = c.PrepareResult(
        profiles={},
        active_provider="p",
        tool_names=sorted([*names, "mcp_lookup"]),
        execution_dir="",
    )
    dumped = json.loads(result.model_dump_json())
    assert len(dumped["tool_names"]) == 2
    assert c.PrepareResult.model_validate(dumped).tool_names == result.tool_names


@pytest.mark.parametrize(
    ("execution_dir", "named"),
    [
        ("/srv/of home/runs/r1/workspace", {"run_home": "/srv/of home"}),
        ("/srv/workspaces/r1", {"run_folder": "/srv/workspaces/*"}),
        ("/srv/runs/r1/other", {"execution_dir": "/srv/runs/r1/other"}),
        ("/srv/project", {"execution_dir": ""}),
    ],
)
def test_a_starts_result_names_the_runs_folder_in_few_bytes(
    execution_dir: str, named: dict[str, str]
) -> None:
    """The run store's own folder by its home, another folder of the run's own by its pattern;
    each reads back as the folder (results before name `run_folder` or the folder itself)."""
    inp = c.PrepareInput(run_id="r1", project_dir="/srv/project")
    assert prepare_run._folder(inp, execution_dir) == named
    result = c.PrepareResult(profiles={}, tool_names=[], **named)
    assert result.folder("r1") == (execution_dir if execution_dir != "/srv/project" else "")
    old = c.PrepareResult(profiles={}, tool_names=[], run_folder="/srv/of home/runs/*/workspace")
    assert old.folder("r1") == "/srv/of home/runs/r1/workspace"
