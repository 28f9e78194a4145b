"""One epoch patch stands for every earlier patch in a new run's history; runs recorded before
it keep asking each patch, so they replay and go on as they ran."""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from openflow import contracts as c
from openflow.client import Runs
from openflow.contracts import Action
from openflow.testing import write_scripted_settings
from openflow.worker import build_worker
from openflow.workflows import calls, handlers, notices, patches
from openflow.workflows import run as run_module
from tests.workflows.conftest import Harness, make_workflow, node, replay_history

ASYNC = pytest.mark.asyncio(loop_scope="session")
WORKFLOWS = Path(run_module.__file__).parent
EPOCH, COVERED = patches.EPOCHS[-1]


def markers(history: WorkflowHistory) -> list[str]:
    """The patch ids a history's markers recorded, in order."""
    found = []
    for event in history.events:
        marker = event.marker_recorded_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and "patch-data" in marker.details
        ):
            data = marker.details["patch-data"].payloads[0].data
            found.append(json.loads(data)["id"])
    return found


def status_upserts(history: WorkflowHistory) -> list[dict[str, Any]]:
    """What each upsert of OpenFlow's own search attributes set, in order."""
    found = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            continue
        fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
        mine = {
            k: json.loads(v.data)
            for k, v in fields.indexed_fields.items()
            if k in (c.SA_STATUS, c.SA_AWAITING)
        }
        if mine:
            found.append(mine)
    return found


def assert_lean(upserts: list[dict[str, Any]]) -> None:
    """Each upsert says only what changed since the start (running, nobody awaited) or the
    upsert before."""
    last: dict[str, Any] = {c.SA_STATUS: "running", c.SA_AWAITING: []}
    for upsert in upserts:
        assert upsert and all(last[k] != v for k, v in upsert.items()), (upsert, last)
        last.update(upsert)


def activities(history: WorkflowHistory) -> list[tuple[str, str]]:
    """Each scheduled activity's type and task queue, in order."""
    return [
        (a.activity_type.name, a.task_queue.name)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        for a in [e.activity_task_scheduled_event_attributes]
    ]


async def executions(client: Client, run_id: str) -> list[WorkflowHistory]:
    """Every execution of a run, first to last."""
    found = []
    async for wf in client.list_workflows(f'WorkflowId = "{run_id}"'):
        found.append(await client.get_workflow_handle(run_id, run_id=wf.run_id).fetch_history())
    return sorted(found, key=lambda h: h.events[0].event_time.ToNanoseconds())


async def _poll(runs: Runs, run_id: str, awaiting: list[str]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while loop.time() < deadline:
        try:
            if (await runs.state(run_id)).awaiting_node_ids == awaiting:
                return
        except Exception:  # noqa: BLE001 - the run may not have answered its first query yet
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run never awaited {awaiting}")


def test_every_patch_the_workflow_asks_is_covered_by_the_epoch() -> None:
    named = {
        run_module.SHORT_EXECUTIONS,
        run_module.POST_RUN_REVIEW,
        run_module.INPUT_LIMITS,
        run_module.FAILED_START_NOTICES,
        run_module.ACTIONS_DELIVERED,
        run_module.LEAN_ATTRIBUTES,
        run_module.SCHEDULE_EACH_FACT,
        run_module.AGENT_REFS,
        calls.TOOL_RECEIPTS,
        calls.TOOL_POOL,
        calls.HANDOFF_IN_TURN,
        calls.PREPARE_LOCAL,
        calls.LEAN_TURN_RESULTS,
        calls.TURN_ACTIVITY_IDS,
        handlers.REQUIRED_FIELDS_PATCH,
        notices.WEBHOOKS,
    }
    assert named == COVERED


def test_workflow_code_asks_patches_through_the_epoch() -> None:
    """`workflow.patched` is called by `patches` alone, so a patch the epoch covers is never
    asked again behind its back."""
    for path in sorted(WORKFLOWS.glob("*.py")):
        if path.name == "patches.py":
            continue
        for found in ast.walk(ast.parse(path.read_text())):
            if isinstance(found, ast.Attribute) and found.attr == "patched":
                raise AssertionError(f"{path.name}:{found.lineno}: use patches.on(...)")


def _two_nodes() -> Any:
    return make_workflow(
        [node("a", tools={"approvalMode": "yolo"}), node("b")],
        [("a", "b")],
    )


def _two_nodes_script() -> dict[str, list[dict[str, Any]]]:
    return {
        "a": [
            {"tools": [{"name": "bash", "args": {"command": "true"}}]},
            {"submit": {"summary": "a"}},
        ],
        "b": [{"submit": {"summary": "b"}}],
    }


@ASYNC
async def test_a_new_run_records_one_marker_and_runs_as_with_every_patch_on(
    harness: Harness,
) -> None:
    harness.script(_two_nodes_script())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(patches, "EPOCHS", ())
        before = await harness.start(_two_nodes())
        assert (await harness.result(before)).status == "completed"
    now = await harness.start(_two_nodes())
    assert (await harness.result(now)).status == "completed"

    old = await harness.handle(before).fetch_history()
    new = await harness.handle(now).fetch_history()
    assert markers(new) == [EPOCH]
    assert len(markers(old)) > 3 and EPOCH not in markers(old)
    # The marker is the first command of the first task.
    assert new.events[4].event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    # The same work, on the same queues, and the same events.
    assert activities(new) == activities(old)
    assert any(queue == c.tool_task_queue(harness.task_queue) for _, queue in activities(new))
    assert "write_handoff" not in {name for name, _ in activities(new)}
    old_events = [e.type for e in await harness.runs.events(before)]
    assert [e.type for e in await harness.runs.events(now)] == old_events
    # The start said "running" with nobody awaited: only the end is upserted.
    assert status_upserts(new) == status_upserts(old) == [{c.SA_STATUS: "completed"}]
    await replay_history(new)


@ASYNC
async def test_a_signal_with_the_start_runs_its_handler_under_the_epoch(
    harness: Harness,
) -> None:
    """A signal that comes with the start is handled before the run method's first line: the
    epoch, consulted when the workflow object is made, already stands for the patches its
    handler asks (an input without its text: `signal-required-fields`)."""
    harness.script({"a": [{"ask": "which?"}, {"submit": {"summary": "done"}}]})
    wf = make_workflow([node("a", requestUserInput=True)], [])
    request = harness.runs.start_request(wf, "go", "run-epoch-signal-with-start")
    await harness.client.start_workflow(
        c.WORKFLOW_NAME,
        request.input,
        id=request.input.run_id,
        task_queue=harness.task_queue,
        search_attributes=request.search_attributes,
        start_signal=c.SIGNAL_INPUT,
        start_signal_args=[{"node_id": "a"}],
    )
    run_id = request.input.run_id
    await harness.wait_for(run_id, lambda s: s.awaiting_node_ids == ["a"])
    await harness.runs.act(run_id, Action(kind="input", node_id="a", text="this one"))
    assert (await harness.result(run_id)).status == "completed"
    history = await harness.handle(run_id).fetch_history()
    assert markers(history) == [EPOCH]
    upserts = status_upserts(history)
    assert_lean(upserts)
    assert {c.SA_AWAITING: ["a"]}.items() <= upserts[0].items()
    assert upserts[-1] == {c.SA_STATUS: "completed"}
    ignored = [e for e in await harness.events(run_id) if e.type == "ActionIgnored"]
    assert len(ignored) == 1 and "text" in ignored[0].reason
    await replay_history(history)


@ASYNC
async def test_a_run_started_before_the_epoch_goes_on_asking_each_patch_then_continues_into_it(
    client: Client, task_queue: str, openflow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run in flight when the epoch ships is taken over by a worker with it: its first task
    replays without the marker, so it asks each patch as it did. The execution it continues
    as new is a new one: it takes the epoch."""
    monkeypatch.setattr(run_module, "HISTORY_EVENTS_LIMIT", 40)
    turns = [{"tools": [{"name": "ls", "args": {"path": "."}}]} for _ in range(6)]
    write_scripted_settings(
        openflow_home, {"a": [{"ask": "go on?"}, *turns, {"submit": {"summary": "done"}}]}
    )
    wf = make_workflow([node("a", requestUserInput=True, tools={"approvalMode": "yolo"})], [])
    runs = Runs(client, task_queue)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(patches, "EPOCHS", ())
        async with build_worker(client, task_queue, openflow_home):
            run_id = await runs.start(wf)
            await _poll(runs, run_id, ["a"])
    async with build_worker(client, task_queue, openflow_home):
        await runs.act(run_id, Action(kind="input", node_id="a", text="yes"))
        raw = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 60)
    assert c.RunResult.model_validate(raw).status == "completed"
    first, *rest = await executions(client, run_id)
    assert rest, "the run never continued as new"
    assert EPOCH not in markers(first)
    # The answer came to the new worker, which asked its patch as the old code did.
    assert run_module.ACTIONS_DELIVERED in markers(first)
    for execution in rest:
        assert markers(execution) == [EPOCH]
        # It started with the status the one before left: no upsert says it again.
        assert_lean(status_upserts(execution))
    assert status_upserts(rest[-1]) == [{c.SA_STATUS: "completed"}]
    # Before the epoch, each upsert carried both; now only what changed.
    assert all(len(u) == 2 for u in status_upserts(first))
    for execution in (first, *rest):
        await replay_history(execution)
