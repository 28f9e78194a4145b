"""Schedules over HTTP: `PUT /workflows/{id}` keeps the schedule in line, `/schedules` shows it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from openflow.schedules import schedule_id
from tests.api.conftest import KEY_A, KEY_B, bearer, node, set_keys, workflow_json

pytestmark = pytest.mark.asyncio(loop_scope="session")


def scheduled(wid: str, **schedule: Any) -> dict[str, Any]:
    flow = workflow_json([node("a")], wf_id=wid)
    flow["settings"] = {"schedule": {"cron": "15 3 * * *", **schedule}}
    return flow


async def listed(api: httpx.AsyncClient, sid: str, **kw: Any) -> dict[str, Any]:
    """The schedule in `GET /schedules`, once Temporal's visibility shows it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while loop.time() < deadline:
        response = await api.get("/schedules", **kw)
        assert response.status_code == 200, response.text
        found = [s for s in response.json() if s["schedule_id"] == sid]
        if found:
            return found[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"{sid} never listed")


async def test_put_creates_the_schedule_and_delete_removes_it(
    api: httpx.AsyncClient, client: Client
) -> None:
    wid = f"api-{uuid.uuid4().hex[:8]}"
    sid = schedule_id(wid)
    created = await api.put(f"/workflows/{wid}", json=scheduled(wid, timezone="Asia/Tokyo"))
    assert created.status_code == 201, created.text
    entry = await listed(api, sid)
    assert entry["workflow_id"] == wid
    assert (entry["cron"], entry["timezone"], entry["paused"]) == (
        "15 3 * * *",
        "Asia/Tokyo",
        False,
    )
    assert entry["next_runs"]

    paused = await api.post(f"/schedules/{wid}/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    resaved = await api.put(f"/workflows/{wid}", json=scheduled(wid, enabled=False))
    assert resaved.status_code == 200
    shown = (await api.get(f"/schedules/{wid}")).json()
    assert (shown["timezone"], shown["paused"]) == ("UTC", True)
    assert "enabled is false" in shown["note"]

    # Saved without a schedule: the schedule goes.
    plain = workflow_json([node("a")], wf_id=wid)
    assert (await api.put(f"/workflows/{wid}", json=plain)).status_code == 200
    assert (await api.get(f"/schedules/{wid}")).status_code == 404

    assert (await api.put(f"/workflows/{wid}", json=scheduled(wid))).status_code == 200
    assert (await api.delete(f"/workflows/{wid}")).status_code == 204
    with pytest.raises(RPCError):
        await client.get_schedule_handle(sid).describe()
    for action in ("pause", "unpause", "trigger"):
        missing = await api.post(f"/schedules/{wid}/{action}")
        assert missing.status_code == 404
        assert missing.json()["error"]["message"] == f"no schedule for workflow {wid!r}"


async def test_bad_cron_or_timezone_is_refused_and_nothing_is_saved(
    api: httpx.AsyncClient, client: Client
) -> None:
    wid = f"api-bad-{uuid.uuid4().hex[:8]}"
    for schedule, field, text in (
        ({"cron": "0 25 * * *"}, "settings.schedule.cron", "the hour '25' is not in 0-23"),
        ({"cron": "0 9 * *"}, "settings.schedule.cron", "it has 4 fields, not 5"),
        ({"timezone": "Europe/Atlantis"}, "settings.schedule.timezone", "'Europe/Atlantis'"),
    ):
        for method, path in (("PUT", f"/workflows/{wid}"), ("POST", "/workflows/validate")):
            response = await api.request(method, path, json=scheduled(wid, **schedule))
            assert response.status_code == 422, response.text
            error = response.json()["error"]
            assert error["code"] == "invalid_schedule"
            assert error["message"].startswith(f"workflow {wid!r}: {field}")
            assert text in error["message"]
    assert (await api.get(f"/workflows/{wid}")).status_code == 404
    with pytest.raises(RPCError):
        await client.get_schedule_handle(schedule_id(wid)).describe()


async def test_another_tenant_neither_sees_nor_takes_a_schedule(
    api: httpx.AsyncClient, openflow_home: Path
) -> None:
    set_keys(openflow_home, {KEY_A: "tenant-a", KEY_B: "tenant-b"})
    wid = f"api-tenant-{uuid.uuid4().hex[:8]}"
    sid = schedule_id(wid)
    put = await api.put(f"/workflows/{wid}", json=scheduled(wid), headers=bearer(KEY_A))
    assert put.status_code == 201, put.text
    await listed(api, sid, headers=bearer(KEY_A))

    taken = await api.put(f"/workflows/{wid}", json=scheduled(wid), headers=bearer(KEY_B))
    assert taken.status_code == 409
    assert "another workflow catalog" in taken.json()["error"]["message"]
    assert (await api.get(f"/workflows/{wid}", headers=bearer(KEY_B))).status_code == 404
    others = await api.get("/schedules", headers=bearer(KEY_B))
    assert sid not in [s["schedule_id"] for s in others.json()]
    trigger = await api.post(f"/schedules/{wid}/trigger", headers=bearer(KEY_B))
    assert trigger.status_code == 404
    synced = await api.post("/schedules/sync", headers=bearer(KEY_B))
    assert sid not in synced.json()["deleted"]

    assert (await api.delete(f"/workflows/{wid}", headers=bearer(KEY_A))).status_code == 204
