"""Schedules from saved workflows: `openflow workflows save|delete` and `openflow schedules ...`
against the session's Temporal server and a worker."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from openflow import contracts as c
from openflow.catalog import Catalog
from openflow.cli import main
from openflow.client import SA_TENANT, SA_WORKFLOW_ID, Runs
from openflow.schedules import Schedules, schedule_id
from openflow.testing import write_scripted_settings
from tests.cli.conftest import (
    Result,
    assert_one_line_error,
    node,
    openflow,
    wait_state,
    workflow,
    write_workflow,
)
from tests.workflows.conftest import history_replayer

pytestmark = pytest.mark.asyncio(loop_scope="session")
T = TypeVar("T")


def scheduled(wid: str, **schedule: Any) -> dict[str, Any]:
    """A one-node workflow whose node asks a question first, with `settings.schedule`."""
    flow = workflow(wid, node("gate", requestUserInput=True))
    flow["settings"] = {"schedule": {"cron": "0 0 1 1 *", **schedule}}
    return flow


async def cli(*args: str) -> Result:
    """`openflow ARGS` in this process (a thread), for speed; the environment is the test's."""

    def call() -> Result:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
        return Result(code, out.getvalue(), err.getvalue())

    return await asyncio.to_thread(call)


async def poll(check: Callable[[], Awaitable[T | None]], timeout: float = 20.0) -> T:
    """The first truthy answer of `check`, asked until the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        answer = await check()
        if answer:
            return answer
        if loop.time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.1)


async def test_a_saved_schedule_starts_a_run_and_skips_while_it_goes(
    openflow_env: dict[str, str], runs: Runs, client: Client, tmp_path: Path
) -> None:
    home = Path(openflow_env["OPENFLOW_HOME"])
    write_scripted_settings(home, {"gate": [{"ask": "Go on?"}, {"echo": True}]})
    wid = f"nightly-{uuid.uuid4().hex[:8]}"
    path = write_workflow(
        tmp_path, scheduled(wid, timezone="Europe/Paris", entrypoint="scheduled hello")
    )

    saved = await openflow(openflow_env, "workflows", "save", str(path))
    assert saved.code == 0, saved.stderr
    sid = schedule_id(wid)
    assert f"schedule {sid} created (active)" in saved.stdout
    assert f"/namespaces/default/schedules/{sid}" in saved.stdout
    desc = await client.get_schedule_handle(sid).describe()
    assert desc.schedule.spec.time_zone_name == "Europe/Paris"
    due = desc.info.next_action_times[0]
    assert (due.astimezone(ZoneInfo("Europe/Paris")).hour, due.day, due.month) == (0, 31, 12)
    assert not desc.schedule.state.paused

    listed = await cli("workflows", "list")
    assert listed.lines == [f"{wid}  app      {wid.title()}  '0 0 1 1 *' Europe/Paris"]

    schedules = Schedules(runs)

    async def running() -> list[str]:
        return (await schedules.get(wid)).running

    triggered = await openflow(openflow_env, "schedules", "trigger", wid)
    assert triggered.code == 0, triggered.stderr
    [run_id] = await poll(running)
    assert run_id.startswith(f"run-{wid}-")
    await wait_state(runs, run_id, lambda s: s.awaiting_node_ids == ["gate"])

    # Due again while the run waits for a person: skipped, not queued.
    again = await cli("schedules", "trigger", wid)
    assert again.code == 0, again.stderr

    async def skipped() -> int:
        return (await schedules.get(wid)).skipped

    assert await poll(skipped) == 1
    assert (await schedules.get(wid)).running == [run_id]

    # The run is an ordinary run: same search attributes, answered like any other.
    run = await client.get_workflow_handle(run_id).describe()
    assert run.typed_search_attributes.get(SA_WORKFLOW_ID) == wid
    # Tenant "": the attribute is left out, as a manual run of a deployment without tenants.
    assert run.typed_search_attributes.get(SA_TENANT) is None
    await runs.act(run_id, c.Action(kind="input", node_id="gate", text="yes"))
    state = await wait_state(runs, run_id, lambda s: s.status == "completed")
    assert state.outputs["gate"] == {"summary": "scheduled hello"}
    assert len((await schedules.get(wid)).recent_runs) == 1
    # The empty run id the schedule carries replays deterministically, under the sandbox.
    await history_replayer().replay_workflow(
        await client.get_workflow_handle(run_id).fetch_history()
    )

    listing = await cli("schedules", "list", "--json")
    [entry] = [s for s in listing.json() if s["schedule_id"] == sid]
    assert entry["entrypoint"] == "scheduled hello"
    assert entry["cron"] == "0 0 1 1 *"

    deleted = await cli("workflows", "delete", wid)
    assert deleted.code == 0, deleted.stderr
    with pytest.raises(RPCError):
        await client.get_schedule_handle(sid).describe()


async def test_resave_disable_delete_and_sync(
    openflow_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    home = Path(openflow_env["OPENFLOW_HOME"])
    wid = f"weekly-{uuid.uuid4().hex[:8]}"
    sid = schedule_id(wid)
    handle = client.get_schedule_handle(sid)
    path = write_workflow(tmp_path, scheduled(wid, cron="0 9 * * 1-5"))
    assert (await cli("workflows", "save", str(path))).code == 0

    path = write_workflow(tmp_path, scheduled(wid, cron="30 6 * * *", timezone="America/New_York"))
    resaved = await cli("workflows", "save", str(path))
    assert f"schedule {sid} updated (active)" in resaved.stdout
    desc = await handle.describe()
    assert desc.schedule.spec.time_zone_name == "America/New_York"
    due = desc.info.next_action_times[0].astimezone(ZoneInfo("America/New_York"))
    assert (due.hour, due.minute) == (6, 30)

    path = write_workflow(tmp_path, scheduled(wid, cron="30 6 * * *", enabled=False))
    disabled = await cli("workflows", "save", str(path))
    assert "paused: settings.schedule.enabled is false" in disabled.stdout
    desc = await handle.describe()
    assert desc.schedule.state.paused
    assert desc.schedule.spec.time_zone_name == "UTC"

    unpaused = await cli("schedules", "unpause", wid)
    assert unpaused.lines == [f"unpaused {sid}"]
    assert not (await handle.describe()).schedule.state.paused
    paused = await cli("schedules", "pause", sid)
    assert paused.lines == [f"paused {sid}"]
    assert (await handle.describe()).schedule.state.paused

    # A schedule deleted by hand comes back with sync.
    path = write_workflow(tmp_path, scheduled(wid))
    assert (await cli("workflows", "save", str(path))).code == 0
    await handle.delete()
    synced = await cli("schedules", "sync")
    assert synced.code == 0, synced.stderr
    assert f"created {sid}" in synced.lines
    assert not (await handle.describe()).schedule.state.paused

    # A workflow removed from the store by hand leaves an orphan that sync deletes.
    store = home / "workflows.json"
    data = json.loads(store.read_text())
    data["workflows"] = [w for w in data["workflows"] if w["id"] != wid]
    store.write_text(json.dumps(data))
    schedules = Schedules(Runs(client, openflow_env["OPENFLOW_TASK_QUEUE"]))

    async def orphan_deleted() -> bool:
        return sid in (await schedules.sync(Catalog(home))).deleted

    await poll(orphan_deleted)
    with pytest.raises(RPCError):
        await handle.describe()

    # A project's workflow: its runs work in the project, and sync finds it there.
    project = tmp_path / "project"
    project.mkdir()
    saved = await cli("workflows", "save", str(path), "--project", str(project))
    assert saved.code == 0, saved.stderr
    assert (project / ".flow" / "workflows" / f"{wid}.workflow.json").is_file()
    shown = await schedules.get(wid)
    assert shown.project_dir == str(project.resolve())

    async def kept() -> bool:
        report = await schedules.sync(Catalog(home))
        assert not report.deleted
        return report.unchanged == [sid]

    await poll(kept)


async def test_bad_schedules_are_refused_and_nothing_is_saved(
    openflow_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    home = Path(openflow_env["OPENFLOW_HOME"])
    wid = f"bad-{uuid.uuid4().hex[:8]}"
    cases = (
        ({"cron": "61 * * * *"}, "settings.schedule.cron '61 * * * *'"),
        ({"cron": "@daily"}, "not a 5-field cron"),
        ({"timezone": "Mars/Olympus"}, "'Mars/Olympus' is not a known time zone"),
    )
    for n, (schedule, expected) in enumerate(cases):
        path = write_workflow(tmp_path, scheduled(wid, **schedule))
        args = ("workflows", "save", str(path))
        result = await (openflow(openflow_env, *args) if n == 0 else cli(*args))
        assert_one_line_error(result, f"workflow {wid!r}", expected)
        validated = await cli("validate", str(path))
        assert validated.code == 2 and expected in validated.stdout
    assert not (home / "workflows.json").exists()
    with pytest.raises(RPCError):
        await client.get_schedule_handle(schedule_id(wid)).describe()

    for action in ("pause", "unpause", "trigger"):
        result = await cli("schedules", action, wid)
        assert_one_line_error(result, f"no schedule for workflow {wid!r}")
    missing = await cli("workflows", "delete", wid)
    assert_one_line_error(missing, f"workflow {wid!r} is not in the catalog")
