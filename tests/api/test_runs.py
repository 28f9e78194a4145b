"""Runs end to end over the API on the real Temporal server: start, pause, act, stop, resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.worker import Worker

from tests.api.conftest import node, wait_for, wait_for_state, workflow_json

pytestmark = pytest.mark.asyncio(loop_scope="session")

ASK = workflow_json([node("ask", requestUserInput=True)])


async def start(api: httpx.AsyncClient, **body: Any) -> str:
    response = await api.post("/runs", json=body)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run_id"]
    assert response.headers["location"] == f"/runs/{run_id}"
    return run_id


async def inbox_item(api: httpx.AsyncClient, run_id: str, kind: str) -> dict[str, Any]:
    """Wait for the run's inbox item of `kind`."""

    async def find() -> dict[str, Any] | None:
        items = (await api.get("/inbox")).json()
        return next((i for i in items if i["run_id"] == run_id and i["kind"] == kind), None)

    item: dict[str, Any] = await wait_for(find)
    return item


async def settle(
    api: httpx.AsyncClient, item: dict[str, Any], label: str, **fields: Any
) -> httpx.Response:
    """Send the request an inbox item names for `label`, with `fields` filled in."""
    action = next(a for a in item["actions"] if a["label"] == label)
    return await api.request(action["method"], action["path"], json={**action["body"], **fields})


async def test_a_paused_run_is_answered_from_the_inbox(
    api: httpx.AsyncClient, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    run_id = await start(api, workflow=ASK, entrypoint="name it", run_id="run-named-by-me")
    assert run_id == "run-named-by-me"

    item = await inbox_item(api, run_id, "input")
    assert item["node_id"] == "ask" and item["label"] == "Ask"
    assert item["question"] == "What name?"
    assert item["workflow_id"] == "wf-api"
    state = (await api.get(f"/runs/{run_id}")).json()
    assert state["status"] == "paused" and state["awaitingNodeIds"] == ["ask"]
    again = await api.post("/runs", json={"workflow": ASK, "run_id": run_id})
    assert again.status_code == 409
    assert "already exists" in again.json()["error"]["message"]

    answered = await settle(api, item, "answer", text="Ada")
    assert answered.status_code == 200, answered.text
    assert answered.json()["accepted"] is True

    state = await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    users = [m["content"] for m in state["chatLogs"]["ask"] if m["role"] == "user"]
    assert users == ["Ada"]
    assert all(i["run_id"] != run_id for i in (await api.get("/inbox")).json())


async def test_a_denied_then_approved_write(
    api: httpx.AsyncClient, worker: Worker, script: Any, openflow_home: Path
) -> None:
    write = {"name": "write", "args": {"path": "out.txt", "content": "hello\n"}}
    script(
        {
            "act": [
                {"tools": [{**write, "id": "call-1"}]},
                {"tools": [{**write, "id": "call-2"}]},
                {"submit": {"summary": "written"}},
            ]
        }
    )
    run_id = await start(api, workflow=workflow_json([node("act")]))

    first = await inbox_item(api, run_id, "approval")
    assert first["tool_call"]["name"] == "write"
    assert first["tool_call"]["arguments"]["path"] == "out.txt"
    denied = await settle(api, first, "deny", reason="not yet")
    assert denied.status_code == 200, denied.text

    async def second_approval() -> dict[str, Any] | None:
        item = await inbox_item(api, run_id, "approval")
        return item if item["approval_id"] != first["approval_id"] else None

    second = await wait_for(second_approval)
    stale = await api.post(f"/runs/{run_id}/approvals/{first['approval_id']}", json={"allow": True})
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "action_rejected"
    approved = await settle(api, second, "approve")
    assert approved.status_code == 200

    await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    events = (await api.get(f"/runs/{run_id}/events")).json()
    kinds = [e["type"] for e in events]
    assert kinds.index("ToolDenied") < kinds.index("ToolApproved")
    denial = next(e for e in events if e["type"] == "ToolDenied")
    assert denial["tool_call_id"] == "call-1" and "not yet" in denial["reason"]
    assert (openflow_home / "runs" / run_id / "workspace" / "out.txt").read_text() == "hello\n"


async def test_a_failed_node_is_retried_from_the_inbox(
    api: httpx.AsyncClient, worker: Worker, script: Any
) -> None:
    script({"fragile": [{"error": "permanent", "message": "bad key"}, {"echo": True}]})
    run_id = await start(api, workflow=workflow_json([node("fragile")]), entrypoint="again")

    item = await inbox_item(api, run_id, "retry")
    assert item["node_id"] == "fragile"
    assert "bad key" in item["error"]
    retried = await settle(api, item, "retry")
    assert retried.status_code == 200, retried.text
    state = await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    assert state["outputs"]["fragile"] == {"summary": "again"}


async def test_actions_the_run_refuses_are_a_409_with_its_reason(
    api: httpx.AsyncClient, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    run_id = await start(api, workflow=ASK)
    await wait_for_state(api, run_id, lambda s: s["awaitingNodeIds"] == ["ask"])

    cases = [
        (f"/runs/{run_id}/input", {"node_id": "other", "text": "x"}, "unknown node 'other'"),
        (f"/runs/{run_id}/approvals/nope", {"allow": True}, "no pending approval 'nope'"),
        (f"/runs/{run_id}/retry", {"node_id": "ask"}, "cannot be retried"),
        (f"/runs/{run_id}/resume", None, "still live"),
    ]
    for path, body, reason in cases:
        response = await api.post(path, json=body)
        assert response.status_code == 409, (path, response.text)
        assert reason in response.json()["error"]["message"]

    await api.post(f"/runs/{run_id}/input", json={"node_id": "ask", "text": "Ada"})
    await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    for path, body, reason in [
        (f"/runs/{run_id}/input", {"node_id": "ask", "text": "late"}, "has ended"),
        (f"/runs/{run_id}/stop", None, "is not running"),
        (f"/runs/{run_id}/resume", None, "completed"),
    ]:
        response = await api.post(path, json=body)
        assert response.status_code == 409, (path, response.text)
        assert reason in response.json()["error"]["message"]


async def test_stop_then_resume_goes_on_from_the_checkpoint(
    api: httpx.AsyncClient, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    run_id = await start(api, workflow=ASK, entrypoint="resume me")
    await wait_for_state(api, run_id, lambda s: s["awaitingNodeIds"] == ["ask"])

    stopped = await api.post(f"/runs/{run_id}/stop")
    assert stopped.status_code == 202
    assert stopped.json() == {"run_id": run_id, "status": "stopping", "workflow_id": None}
    await wait_for_state(api, run_id, lambda s: s["status"] == "stopped")

    resumed = await api.post(f"/runs/{run_id}/resume")
    assert resumed.status_code == 202, resumed.text
    await wait_for_state(api, run_id, lambda s: s["status"] == "paused")
    await inbox_item(api, run_id, "input")
    answered = await api.post(f"/runs/{run_id}/input", json={"node_id": "ask", "text": "Ada"})
    assert answered.status_code == 200, answered.text
    state = await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    assert state["outputs"]["ask"] == {"summary": "resume me"}

    events = (await api.get(f"/runs/{run_id}/events")).json()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    kinds = [e["type"] for e in events]
    assert "Aborted" in kinds and kinds[-1] == "Finished"
    later = (await api.get(f"/runs/{run_id}/events", params={"after": 3})).json()
    assert [e["seq"] for e in later] == list(range(4, len(events) + 1))


async def test_a_run_from_the_catalog_keeps_the_workflow_it_started_with(
    api: httpx.AsyncClient, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    assert (await api.put("/workflows/wf-api", json=ASK)).status_code == 201
    run_id = await start(api, workflow_id="wf-api", entrypoint="snap")
    await wait_for_state(api, run_id, lambda s: s["awaitingNodeIds"] == ["ask"])

    edited = workflow_json([node("ask", requestUserInput=True), node("more")], [("ask", "more")])
    assert (await api.put("/workflows/wf-api", json=edited)).status_code == 200
    await api.post(f"/runs/{run_id}/input", json={"node_id": "ask", "text": "Ada"})
    state = await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    assert set(state["statusByNode"]) == {"ask"}

    async def listed() -> list[dict[str, Any]]:
        runs = (await api.get("/runs", params={"status": "completed"})).json()
        return [r for r in runs if r["run_id"] == run_id]

    [summary] = await wait_for(listed)
    assert summary["workflow_id"] == "wf-api"
    assert summary["workflow_name"] == "API test workflow"
    by_workflow = (await api.get("/runs", params={"workflow_id": "wf-api"})).json()
    assert run_id in [r["run_id"] for r in by_workflow]
    elsewhere = (await api.get("/runs", params={"workflow_id": "wf-other"})).json()
    assert run_id not in [r["run_id"] for r in elsewhere]


async def test_messages_reach_a_waiting_node(
    api: httpx.AsyncClient, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    run_id = await start(api, workflow=ASK)
    await wait_for_state(api, run_id, lambda s: s["awaitingNodeIds"] == ["ask"])
    sent = await api.post(f"/runs/{run_id}/messages", json={"node_id": "ask", "text": "Grace"})
    assert sent.status_code == 200, sent.text
    state = await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    assert "Grace" in [m["content"] for m in state["chatLogs"]["ask"] if m["role"] == "user"]


async def test_the_inbox_lists_the_newest_pause_first(
    api: httpx.AsyncClient, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    older = await start(api, workflow=ASK)
    await inbox_item(api, older, "input")
    newer = await start(api, workflow=ASK)
    await inbox_item(api, newer, "input")
    order = [i["run_id"] for i in (await api.get("/inbox")).json()]
    assert order.index(newer) < order.index(older)
