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


def turn(*calls: tuple[str, str, str]) -> dict[str, Any]:
    """One model turn asking to write each `(call id, path, content)`."""
    return {
        "tools": [
            {"id": i, "name": "write", "args": {"path": path, "content": text}}
            for i, path, text in calls
        ]
    }


def sent_results(home: Path, run_id: str, node_id: str) -> list[dict[str, Any]]:
    """The tool results the node's model calls were sent (its transcript in the run store)."""
    lines = (home / "runs" / run_id / "transcripts" / f"{node_id}.jsonl").read_text().splitlines()
    items = [json.loads(line) for line in lines if line.strip()]
    return [i["result"] for i in items if i.get("kind") == "tool_result"]


async def test_one_call_allowed_one_denied_one_edited_and_by_defaults_to_the_tenant(
    api: httpx.AsyncClient, worker: Worker, script: Any, openflow_home: Path, client: Client
) -> None:
    three = turn(("c-a", "a.txt", "A"), ("c-b", "b.txt", "B"), ("c-c", "c.txt", "C"))
    script({"act": [three, {"submit": {"summary": "done"}}]})
    set_keys(openflow_home, {KEY_A: "tenant-a"})
    api.headers.update(bearer(KEY_A))
    response = await api.post("/runs", json={"workflow": workflow_json([node("act")])})
    assert response.status_code == 201, response.text
    run_id = response.json()["run_id"]

    first = await pending(api, run_id)
    assert [call["id"] for call in first["toolCalls"]] == ["c-a", "c-b", "c-c"]
    path = f"/runs/{run_id}/approvals/{first['approvalId']}"

    async def inbox_item() -> dict[str, Any] | None:
        return next((i for i in (await api.get("/inbox")).json() if i["run_id"] == run_id), None)

    item = await wait_for(inbox_item)
    decide = next(a for a in item["actions"] if a["label"] == "decide")
    assert decide["path"] == path

    # What the run's state refuses is a 409 naming the call or the field; nothing is recorded.
    handle = client.get_workflow_handle(run_id)
    before = len((await handle.fetch_history()).events)
    refused = [
        ({"allow": True, "decisions": [{"call_id": "zz", "allow": False}]}, "no call 'zz'"),
        ({"decisions": [{"call_id": "c-a", "allow": True}]}, "call 'c-b'"),
        (
            {
                "allow": True,
                "decisions": [{"call_id": "c-c", "allow": True, "arguments": {"path": 5}}],
            },
            "decisions[0].arguments: the edit of call 'c-c' does not fit write's schema",
        ),
        (
            {
                "allow": True,
                "decisions": [{"call_id": "c-c", "allow": True, "arguments": {"path": "c"}}],
            },
            "'content' is a required property",
        ),
        (
            {"allow": True, "remember": {"tool": "openflow_write_plan_artifact"}},
            "remember: 'openflow_write_plan_artifact' always asks",
        ),
        (
            {"allow": True, "remember": {"tool": "write", "path_prefix": "../out"}},
            "remember.path_prefix",
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
    assert len((await handle.fetch_history()).events) == before

    # A signal that decides an unknown call is recorded as ignored; nothing runs.
    bad = {
        "approval_id": first["approvalId"],
        "allow": True,
        "decisions": [{"call_id": "zz", "allow": True}],
    }
    await handle.signal(c.SIGNAL_APPROVAL, bad)

    async def ignored() -> list[dict[str, Any]]:
        events = (await api.get(f"/runs/{run_id}/events")).json()
        return [e for e in events if e["type"] == "ActionIgnored"]

    assert "no call 'zz'" in (await wait_for(ignored))[0]["reason"]
    assert (await pending(api, run_id))["approvalId"] == first["approvalId"]

    decided = await api.post(
        path,
        json={
            "decisions": [
                {"call_id": "c-a", "allow": True},
                {"call_id": "c-b", "allow": False, "reason": "not b"},
                {"call_id": "c-c", "allow": True, "arguments": {"path": "c2.txt", "content": "E"}},
            ]
        },
    )
    assert decided.status_code == 200, decided.text

    state = await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    workspace = openflow_home / "runs" / run_id / "workspace"
    assert sorted(p.name for p in workspace.glob("*.txt")) == ["a.txt", "c2.txt"]
    assert (workspace / "c2.txt").read_text() == "E"
    # The model's next request carried a result for every call, the denial with its reason.
    results = {r["tool_call_id"]: r for r in sent_results(openflow_home, run_id, "act")}
    assert set(results) == {"c-a", "c-b", "c-c"}
    assert "not b" in results["c-b"]["content"] and results["c-b"]["is_error"]
    assert not results["c-c"].get("is_error")
    lines = (openflow_home / "runs" / run_id / "transcripts" / "act.jsonl").read_text()
    assert "[edited by the user] Your call write (c-c)" in lines
    events = (await api.get(f"/runs/{run_id}/events")).json()
    approved = {e["tool_call_id"]: e for e in events if e["type"] == "ToolApproved"}
    assert approved["c-c"]["arguments"] == {"path": "c2.txt", "content": "E"}
    assert {e["by"] for e in approved.values()} == {"tenant-a"}
    denials = [
        (e["tool_call_id"], e["reason"], e["by"]) for e in events if e["type"] == "ToolDenied"
    ]
    assert denials == [("c-b", "not b", "tenant-a")]
    assert any("by tenant-a" in t["message"] for t in state["runTrace"])
    assert await decided_by(client, run_id) == ["tenant-a"]
    await replay.replay_history(await handle.fetch_history())


async def test_remembered_writes_under_a_prefix_run_without_a_pause(
    api: httpx.AsyncClient, worker: Worker, script: Any, openflow_home: Path, client: Client
) -> None:
    script(
        {
            "act": [
                turn(("c-1", "docs/one.md", "1")),
                turn(("c-2", "docs/two.md", "2")),
                turn(("c-3", "docs/sub/three.md", "3")),
                turn(("c-4", "src/four.py", "4")),
                {"submit": {"summary": "done"}},
            ]
        }
    )
    response = await api.post("/runs", json={"workflow": workflow_json([node("act")])})
    run_id = response.json()["run_id"]
    first = await pending(api, run_id)
    decided = await api.post(
        f"/runs/{run_id}/approvals/{first['approvalId']}",
        json={"allow": True, "remember": {"tool": "write", "path_prefix": "docs/"}, "by": "Ada"},
    )
    assert decided.status_code == 200, decided.text
    second = await pending(api, run_id, before=first["approvalId"])
    assert [call["id"] for call in second["toolCalls"]] == ["c-4"]
    state = (await api.get(f"/runs/{run_id}")).json()
    assert state["grants"] == [
        {
            "tool": "write",
            "pathPrefix": "docs/",
            "nodeId": "act",
            "by": "Ada",
            "atMs": state["grants"][0]["atMs"],
        }
    ]
    workspace = openflow_home / "runs" / run_id / "workspace"
    written = sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*") if p.is_file())
    assert written == ["docs/one.md", "docs/sub/three.md", "docs/two.md"]
    events = (await api.get(f"/runs/{run_id}/events")).json()
    assert sum(e["type"] == "ToolApprovalRequested" for e in events) == 2
    by_grant = [e["tool_call_id"] for e in events if e["type"] == "ToolApproved" and e.get("grant")]
    assert by_grant == ["c-2", "c-3"]

    # Revoked, a grant no longer applies; revoking it again is refused by name.
    handle = client.get_workflow_handle(run_id)
    revoke = f"/runs/{run_id}/grants/revoke"
    revoked = await api.post(revoke, json={"tool": "write", "path_prefix": "docs/"})
    assert revoked.status_code == 200, revoked.text
    again = await api.post(revoke, json={"tool": "write", "path_prefix": "docs/"})
    assert again.status_code == 409
    assert "no grant 'write:docs/'" in again.json()["error"]["message"]
    unknown = await api.post(revoke, json={"tool": "write", "prefix": "docs/"})
    assert unknown.status_code == 422 and "body.prefix" in unknown.json()["error"]["message"]
    events = (await api.get(f"/runs/{run_id}/events")).json()
    assert len([e for e in events if e["type"] == "GrantRevoked"]) == 1
    assert (await api.get(f"/runs/{run_id}")).json()["grants"] == []
    await api.post(f"/runs/{run_id}/approvals/{second['approvalId']}", json={"allow": True})
    await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    await replay.replay_history(await handle.fetch_history())
