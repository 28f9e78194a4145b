"""Approvals per call over the API: bad bodies are 4xx, agreeing decisions decide the batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from openflow import contracts as c
from tests.api.conftest import (
    KEY_A,
    bearer,
    node,
    set_keys,
    wait_for,
    wait_for_state,
    workflow_json,
)
from tests.workflows import conftest as replay

pytestmark = pytest.mark.asyncio(loop_scope="session")


def writes(*names: str) -> dict[str, Any]:
    """One model turn asking to write each file, call ids `c-<name>`."""
    return {
        "tools": [
            {"id": f"c-{n}", "name": "write", "args": {"path": f"{n}.txt", "content": n}}
            for n in names
        ]
    }


async def pending(api: httpx.AsyncClient, run_id: str, before: str = "") -> dict[str, Any]:
    """The run's pending approval (another than `before`)."""

    async def find() -> dict[str, Any] | None:
        state = (await api.get(f"/runs/{run_id}")).json()
        items = [a for a in state.get("pendingApprovals") or [] if a["approvalId"] != before]
        return items[0] if items else None

    found: dict[str, Any] = await wait_for(find)
    return found


async def decided_by(client: Client, run_id: str) -> list[str | None]:
    """The `by` of each `act` update the run's history accepted, in order."""
    found: list[str | None] = []
    history = await client.get_workflow_handle(run_id).fetch_history()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            attrs = event.workflow_execution_update_accepted_event_attributes
            payload = attrs.accepted_request.input.args.payloads[0]
            found.append(json.loads(payload.data).get("by"))
    return found


async def test_bad_approval_bodies_are_4xx_naming_the_field(api: httpx.AsyncClient) -> None:
    path = "/runs/run-any/approvals/ap-1"
    cases = [
        ({}, "give 'allow' for the whole batch or 'decisions'"),
        ({"decisions": [{"allow": True}]}, "body.decisions.0.call_id"),
        (
            {"decisions": [{"call_id": "a", "allow": True}, {"call_id": "a", "allow": True}]},
            "call 'a' is decided twice",
        ),
        ({"decisions": [{"call_id": "a", "allow": True, "arguments": "x"}]}, "arguments"),
        ({"allow": True, "remember": {}}, "body.remember.tool"),
        ({"allow": True, "remember": {"tool": "write", "path_prefix": ""}}, "path_prefix"),
        ({"allow": True, "by": "x" * 201}, "body.by"),
        ({"allow": True, "by": "a\u0007b"}, "body.by"),
        ({"allow": True, "who": "me"}, "body.who"),
    ]
    for body, named in cases:
        response = await api.post(path, json=body)
        assert response.status_code == 422, (body, response.text)
        assert named in response.json()["error"]["message"], (body, response.text)
    broken = await api.post(path, content=b'{"allow": tru', headers={"content-type": "x/json"})
    assert 400 <= broken.status_code < 500


async def test_decisions_that_agree_decide_the_batch_and_by_defaults_to_the_tenant(
    api: httpx.AsyncClient, worker: Worker, script: Any, openflow_home: Path, client: Client
) -> None:
    script({"act": [writes("a", "b"), writes("c", "d"), {"submit": {"summary": "done"}}]})
    set_keys(openflow_home, {KEY_A: "tenant-a"})
    api.headers.update(bearer(KEY_A))
    response = await api.post("/runs", json={"workflow": workflow_json([node("act")])})
    assert response.status_code == 201, response.text
    run_id = response.json()["run_id"]

    first = await pending(api, run_id)
    assert [call["id"] for call in first["toolCalls"]] == ["c-a", "c-b"]
    path = f"/runs/{run_id}/approvals/{first['approvalId']}"

    async def inbox_item() -> dict[str, Any] | None:
        return next((i for i in (await api.get("/inbox")).json() if i["run_id"] == run_id), None)

    item = await wait_for(inbox_item)
    decide = next(a for a in item["actions"] if a["label"] == "decide")
    assert decide["path"] == path
    assert decide["body"] == {
        "decisions": [{"call_id": "c-a", "allow": True}, {"call_id": "c-b", "allow": True}]
    }
    refused = [
        (
            {"decisions": [{"call_id": "c-a", "allow": True}, {"call_id": "c-b", "allow": False}]},
            "decides an approval as a whole",
        ),
        ({"allow": True, "decisions": [{"call_id": "zz", "allow": False}]}, "no call 'zz'"),
        ({"decisions": [{"call_id": "c-a", "allow": True}]}, "call 'c-b'"),
        ({"allow": True, "remember": {"tool": "write"}}, "remember"),
        (
            {
                "decisions": [
                    {"call_id": "c-a", "allow": True, "arguments": {"path": "x.txt"}},
                    {"call_id": "c-b", "allow": True},
                ]
            },
            "edited arguments",
        ),
    ]
    for body, reason in refused:
        answer = await api.post(path, json=body)
        assert answer.status_code == 409, (body, answer.text)
        assert reason in answer.json()["error"]["message"], (body, answer.text)

    elsewhere = await api.post(
        f"/runs/{run_id}/approvals/nope", json={"decisions": [{"call_id": "c-a", "allow": True}]}
    )
    assert elsewhere.status_code == 409
    assert "no pending approval 'nope'" in elsewhere.json()["error"]["message"]

    # A signal the worker cannot apply as one decision is recorded as ignored; nothing runs.
    handle = client.get_workflow_handle(run_id)
    mixed = {
        "approval_id": first["approvalId"],
        "decisions": [{"call_id": "c-a", "allow": True}, {"call_id": "c-b", "allow": False}],
    }
    await handle.signal(c.SIGNAL_APPROVAL, mixed)

    async def ignored() -> list[dict[str, Any]]:
        events = (await api.get(f"/runs/{run_id}/events")).json()
        return [e for e in events if e["type"] == "ActionIgnored"]

    assert "decides an approval as a whole" in (await wait_for(ignored))[0]["reason"]
    assert (await pending(api, run_id))["approvalId"] == first["approvalId"]

    denied = await api.post(
        path,
        json={
            "decisions": [
                {"call_id": "c-a", "allow": False, "reason": "later"},
                {"call_id": "c-b", "allow": False, "reason": "later"},
            ]
        },
    )
    assert denied.status_code == 200, denied.text

    second = await pending(api, run_id, before=first["approvalId"])
    approved = await api.post(
        f"/runs/{run_id}/approvals/{second['approvalId']}",
        json={"allow": True, "decisions": [{"call_id": "c-c", "allow": True}], "by": "Grace"},
    )
    assert approved.status_code == 200, approved.text

    await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    events = (await api.get(f"/runs/{run_id}/events")).json()
    denials = {e["tool_call_id"]: e["reason"] for e in events if e["type"] == "ToolDenied"}
    assert set(denials) == {"c-a", "c-b"} and all("later" in r for r in denials.values())
    workspace = openflow_home / "runs" / run_id / "workspace"
    assert sorted(p.name for p in workspace.glob("*.txt")) == ["c.txt", "d.txt"]
    assert await decided_by(client, run_id) == ["tenant-a", "Grace"]
    # The ignored signal, the refused updates and both decisions replay under the sandbox.
    await replay.replay_history(await handle.fetch_history())
