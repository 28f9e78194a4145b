"""A budget on the real Temporal server: a run with a tiny one pauses saying "budget", the inbox
shows it, `openflow runs budget` raises it and the run completes; bad budgets are refused."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.worker import Worker

from tests.api.conftest import node, wait_for_state, workflow_json
from tests.api.test_runs import inbox_item, start

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
READ = {"name": "read", "args": {"path": "notes.txt"}}


def price_the_model(home: Path) -> None:
    """$100 per million tokens: a scripted call (a hundred tokens or more) costs about a cent."""
    path = home / "settings.json"
    data = json.loads(path.read_text())
    data["prices"] = {"test-model": {"input": 100.0, "output": 100.0}}
    path.write_text(json.dumps(data))


async def openflow(*args: str) -> subprocess.CompletedProcess[str]:
    """The `openflow` command, in a thread: the test's worker shares this event loop."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "openflow.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_tiny_budget_pauses_and_raising_it_completes_the_run(
    api: httpx.AsyncClient,
    worker: Worker,
    script: Any,
    openflow_home: Path,
    openflow_env: dict[str, str],
) -> None:
    script({"work": [{"tools": [READ]}, {"tools": [READ]}, {"submit": {"summary": "done"}}]})
    price_the_model(openflow_home)
    wf = workflow_json([node("work")])
    wf["settings"] = {"budget": {"maxCostUsd": 100.0, "maxTokens": 10_000_000}}
    run_id = await start(api, workflow=wf, entrypoint="go", budget={"maxCostUsd": 0.005})

    item = await inbox_item(api, run_id, "retry")
    assert item["node_id"] == "work"
    assert item["error"].startswith("budget reached: $0.0")
    assert f"openflow runs budget {run_id} --max-cost USD" in item["error"]
    raise_it = next(a for a in item["actions"] if a["label"] == "raise budget")
    assert raise_it["path"] == f"/runs/{run_id}/budget" and raise_it["body"] == {"maxCostUsd": None}
    state = (await api.get(f"/runs/{run_id}")).json()
    assert state["status"] == "paused" and state["statusByNode"]["work"] == "failed"
    assert "budget" in state["lastError"]
    spent = state["usage"]["run"]["estimatedCostUsd"]
    assert spent >= 0.005
    shown = await openflow("runs", "show", run_id)
    assert shown.returncode == 0 and "budget reached" in shown.stdout
    assert f"answer: openflow runs budget {run_id} --max-cost USD" in shown.stdout
    listed = await openflow("runs", "list", "--cost")
    line = next(row for row in listed.stdout.splitlines() if row.startswith(run_id))
    assert f"~${spent:.4f}" in line

    # Bad budgets: a 422 over HTTP, one line and exit 2 at the terminal; nothing changes.
    for body in ({}, {"maxCostUsd": -1}, {"maxCostUsd": "lots"}, {"maxTokens": 1.5}, {"x": 1}):
        refused = await api.post(f"/runs/{run_id}/budget", json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert "message" in refused.json()["error"]
    bad = await api.post("/runs", json={"workflow": wf, "budget": {"maxCostUsd": 0}})
    assert bad.status_code == 422 and "maxCostUsd" in bad.text
    for args in (["--max-cost", "-1"], ["--max-cost", "abc"], ["--max-tokens", "0"], []):
        result = await openflow("runs", "budget", run_id, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    events = (await api.get(f"/runs/{run_id}/events")).json()
    assert not [e for e in events if e["type"] == "ActionIgnored"]

    raised = await openflow("runs", "budget", run_id, "--max-cost", "0.5")
    assert raised.returncode == 0, raised.stderr
    assert "budget set to $0.5000" in raised.stdout
    state = await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    assert state["outputs"]["work"] == {"summary": "done"}
    assert state["usage"]["run"]["estimatedCostUsd"] > spent


async def test_the_act_update_refuses_a_bad_budget_with_nothing_in_history(
    api: httpx.AsyncClient, worker: Worker, script: Any, client: Client
) -> None:
    script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    run_id = await start(api, workflow=workflow_json([node("ask", requestUserInput=True)]))
    await wait_for_state(api, run_id, lambda s: s["awaitingNodeIds"] == ["ask"])
    handle = client.get_workflow_handle(run_id)
    before = len((await handle.fetch_history()).events)
    cases = [
        ({"kind": "budget"}, "needs max_cost_usd or max_tokens"),
        ({"kind": "budget", "max_cost_usd": -1}, "greater than 0"),
        ({"kind": "budget", "max_tokens": "many"}, "max_tokens"),
        ({"kind": "retry", "node_id": "ask", "max_tokens": 5}, "only a budget action"),
    ]
    for payload, reason in cases:
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("act", payload)
        assert reason in str(refused.value.cause), payload
    assert len((await handle.fetch_history()).events) == before
    # A budget set on a run without one is taken; the run goes on.
    taken = await api.post(f"/runs/{run_id}/budget", json={"maxTokens": 1_000_000})
    assert taken.status_code == 200, taken.text
    await api.post(f"/runs/{run_id}/input", json={"node_id": "ask", "text": "Ada"})
    await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
