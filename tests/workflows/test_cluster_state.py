"""Runs whose state lives in PostgreSQL: nothing in the worker's home, a database restart survived."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from openflow.activities.pgstore import PostgresRunStore
from openflow.backends import close_shared_database, open_shared_database
from openflow.testing import write_scripted_settings
from openflow.worker import build_worker
from tests.pg import PgServer
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


async def test_a_run_on_the_database_writes_nothing_under_the_worker_home(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home, workspaces = tmp_path / "worker-home", tmp_path / "workspaces"
    workspaces.mkdir()
    monkeypatch.setenv("OPENFLOW_DATABASE_URL", pg_url)
    monkeypatch.setenv("OPENFLOW_WORKSPACES", str(workspaces))
    monkeypatch.setenv("OPENFLOW_HOME", str(home))
    write_scripted_settings(
        home,
        {
            "make": [
                {
                    "tools": [
                        {"name": "write", "args": {"path": "out.txt", "content": "made\n"}},
                        {"name": "bash", "args": {"command": "seq 1 20000"}},
                    ]
                },
                {"tools": [{"name": "write", "args": {"path": "out.txt", "content": "again\n"}}]},
                {"submit": {"summary": "made it"}},
            ],
            "check": [
                {"tools": [{"name": "read", "args": {"path": "run://handoffs/make/HANDOFF.json"}}]},
                {"submit": {"summary": "checked"}},
            ],
        },
    )
    wf = make_workflow(
        [
            node("make", tools={"approvalMode": "yolo"}),
            node("check", tools={"approvalMode": "yolo"}),
        ],
        [("make", "check")],
    )
    async with build_worker(client, task_queue, home):
        harness = Harness(client, task_queue, home)
        run_id = await harness.start(wf)
        result = await harness.result(run_id)
        assert result.status == "completed", result
        await harness.replay(run_id)
        events = await harness.events(run_id)

    assert _files(home) == ["settings.json"], "run state was written under the worker's home"
    assert (workspaces / run_id / "out.txt").read_text() == "again\n"
    store = PostgresRunStore(open_shared_database(pg_url))
    keys = store.list(run_id)
    assert "transcripts/make.jsonl" in keys and "handoffs/make/HANDOFF.json" in keys
    spilled = [k for k in keys if k.startswith("artifacts/") and k.endswith("-bash.txt")]
    assert len(spilled) == 1 and b"\n20000\n" in store.get_bytes(run_id, spilled[0])
    assert any(k.startswith("snapshots/") for k in keys), "the overwrite's before-snapshot"
    close_shared_database(pg_url)
    # The second node read the first one's handoff through the store, on the worker's copy.
    read = [e for e in events if e.type == "ToolCompleted" and e.tool_name == "read"]
    assert read and "made it" in json.dumps(read[0].model_dump(mode="json"))


async def test_the_run_goes_on_after_the_database_is_down_for_ten_seconds(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = PgServer()
    server.start()
    try:
        home, workspaces = tmp_path / "worker-home", tmp_path / "workspaces"
        workspaces.mkdir()
        monkeypatch.setenv("OPENFLOW_DATABASE_URL", server.url)
        monkeypatch.setenv("OPENFLOW_WORKSPACES", str(workspaces))
        turns: list[dict[str, Any]] = [
            {"tools": [{"name": "bash", "args": {"command": f"echo {i} >> ledger.txt"}}]}
            for i in range(6)
        ]
        write_scripted_settings(home, {"work": [*turns, {"submit": {"summary": "done"}}]})
        wf = make_workflow([node("work", tools={"approvalMode": "yolo"})], [])
        async with build_worker(client, task_queue, home):
            harness = Harness(client, task_queue, home)
            run_id = await harness.start(wf)
            ledger = workspaces / run_id / "ledger.txt"
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while not (ledger.exists() and ledger.read_text().split()[:1] == ["0"]):
                assert loop.time() < deadline, "the run never started its tools"
                await asyncio.sleep(0.02)
            await asyncio.to_thread(server.stop)
            await asyncio.sleep(10)
            await asyncio.to_thread(server.start)
            result = await harness.result(run_id, timeout=90)
            assert result.status == "completed", result
            await harness.replay(run_id)
        assert ledger.read_text().split() == [str(i) for i in range(6)]
    finally:
        close_shared_database(server.url)
        server.close()


async def test_a_worker_that_cannot_see_the_folder_retries_and_never_writes_elsewhere(
    client: Client, task_queue: str, tmp_path: Path, openflow_home: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write_scripted_settings(
        openflow_home,
        {
            "work": [
                {"message": "thinking", "delay_ms": 1500},
                {"tools": [{"name": "write", "args": {"path": "made.txt", "content": "ok"}}]},
                {"submit": {"summary": "done"}},
            ]
        },
    )
    wf = make_workflow([node("work", tools={"approvalMode": "yolo"})], [])
    away = tmp_path / "unmounted"
    async with build_worker(client, task_queue, openflow_home):
        harness = Harness(client, task_queue, openflow_home)
        run_id = await harness.start(wf, project_dir=str(project))
        await harness.wait_for(run_id, lambda s: s.status_by_node.get("work") == "started")
        project.rename(away)  # the volume is gone from this worker
        history = harness.handle(run_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            events = [e async for e in history.fetch_history_events()]
            failed = [
                e.activity_task_failed_event_attributes.failure.message
                for e in events
                if e.HasField("activity_task_failed_event_attributes")
            ]
            if failed:
                break
            assert loop.time() < deadline, "the batch never failed"
            await asyncio.sleep(0.1)
        assert "is not visible on this worker" in failed[0]
        assert not project.exists(), "the project folder was made again elsewhere"
        away.rename(project)  # mounted again: the batch runs on the next try
        result = await harness.result(run_id, timeout=60)
        assert result.status == "completed", result
        await harness.replay(run_id)
    assert (project / "made.txt").read_text() == "ok"
