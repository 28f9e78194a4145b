"""Tenants: bearer keys from settings.json; another tenant's runs and workflows do not exist."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.worker import Worker

from openflow.api import UnsafeBind, create_app, is_loopback, serve
from tests.api.conftest import (
    KEY_A,
    KEY_B,
    bearer,
    node,
    set_keys,
    wait_for_state,
    workflow_json,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

ASK = workflow_json([node("ask", requestUserInput=True)], wf_id="wf-tenant")


def run_routes(run_id: str) -> list[tuple[str, str, Any]]:
    """Every route that names a run."""
    return [
        ("GET", f"/runs/{run_id}", None),
        ("GET", f"/runs/{run_id}/events", None),
        ("POST", f"/runs/{run_id}/input", {"node_id": "ask", "text": "Ada"}),
        ("POST", f"/runs/{run_id}/approvals/ap-1", {"allow": True}),
        ("POST", f"/runs/{run_id}/retry", {"node_id": "ask"}),
        ("POST", f"/runs/{run_id}/messages", {"node_id": "ask", "text": "hi"}),
        ("POST", f"/runs/{run_id}/stop", None),
        ("POST", f"/runs/{run_id}/resume", None),
    ]


ALL_ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/workflows", None),
    ("POST", "/workflows/validate", ASK),
    ("GET", "/workflows/wf-tenant", None),
    ("PUT", "/workflows/wf-tenant", ASK),
    ("DELETE", "/workflows/wf-tenant", None),
    ("POST", "/runs", {"workflow": ASK}),
    ("GET", "/runs", None),
    ("GET", "/inbox", None),
    *run_routes("run-any"),
]


async def test_every_route_but_health_needs_a_valid_key(
    api: httpx.AsyncClient, openflow_home: Path
) -> None:
    set_keys(openflow_home, {KEY_A: "tenant-a"})
    for method, path, body in ALL_ROUTES:
        for headers in ({}, bearer("wrong-key"), {"Authorization": f"Basic {KEY_A}"}):
            response = await api.request(method, path, json=body, headers=headers)
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"] == "Bearer"
    assert (await api.get("/health")).status_code == 200
    assert (await api.get("/workflows", headers=bearer(KEY_A))).status_code == 200


async def test_another_tenants_run_is_a_404_on_every_route(
    api: httpx.AsyncClient, openflow_home: Path, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "What name?"}, {"echo": True}]})
    set_keys(openflow_home, {KEY_A: "tenant-a", KEY_B: "tenant-b"})
    started = await api.post("/runs", json={"workflow": ASK}, headers=bearer(KEY_A))
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    await wait_for_state(
        api, run_id, lambda s: s["awaitingNodeIds"] == ["ask"], headers=bearer(KEY_A)
    )

    for method, path, body in run_routes(run_id):
        response = await api.request(method, path, json=body, headers=bearer(KEY_B))
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["code"] == "run_not_found"
        anonymous = await api.request(method, path, json=body)
        assert anonymous.status_code == 401

    listed_b = await api.get("/runs", headers=bearer(KEY_B))
    assert run_id not in [r["run_id"] for r in listed_b.json()]
    assert (await api.get("/inbox", headers=bearer(KEY_B))).json() == []
    listed_a = await api.get("/runs", headers=bearer(KEY_A))
    assert [r for r in listed_a.json() if r["run_id"] == run_id][0]["tenant"] == "tenant-a"
    inbox_a = (await api.get("/inbox", headers=bearer(KEY_A))).json()
    assert [(i["run_id"], i["kind"]) for i in inbox_a] == [(run_id, "input")]

    answered = await api.post(
        f"/runs/{run_id}/input", json={"node_id": "ask", "text": "Ada"}, headers=bearer(KEY_A)
    )
    assert answered.status_code == 200, answered.text
    await wait_for_state(api, run_id, lambda s: s["status"] == "completed", headers=bearer(KEY_A))


async def test_each_tenant_has_its_own_catalog(api: httpx.AsyncClient, openflow_home: Path) -> None:
    set_keys(openflow_home, {KEY_A: "tenant-a", KEY_B: "tenant/b"})
    saved = await api.put("/workflows/wf-tenant", json=ASK, headers=bearer(KEY_A))
    assert saved.status_code == 201
    assert (await api.get("/workflows/wf-tenant", headers=bearer(KEY_B))).status_code == 404
    assert (await api.get("/workflows", headers=bearer(KEY_B))).json() == []
    assert (await api.delete("/workflows/wf-tenant", headers=bearer(KEY_B))).status_code == 404
    started = await api.post("/runs", json={"workflow_id": "wf-tenant"}, headers=bearer(KEY_B))
    assert started.status_code == 404
    assert [w["id"] for w in (await api.get("/workflows", headers=bearer(KEY_A))).json()] == [
        "wf-tenant"
    ]
    assert not (openflow_home / "tenants" / "tenant").exists()


async def test_keys_take_effect_when_settings_change(
    api: httpx.AsyncClient, openflow_home: Path
) -> None:
    assert (await api.get("/workflows")).status_code == 200
    set_keys(openflow_home, {KEY_A: "tenant-a"})
    assert (await api.get("/workflows")).status_code == 401
    assert (await api.get("/workflows", headers=bearer(KEY_A))).status_code == 200
    set_keys(openflow_home, {KEY_B: "tenant-a"})
    assert (await api.get("/workflows", headers=bearer(KEY_A))).status_code == 401
    assert (await api.get("/workflows", headers=bearer(KEY_B))).status_code == 200


async def test_keys_never_reach_the_log(
    api: httpx.AsyncClient, openflow_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    set_keys(openflow_home, {KEY_A: "tenant-a"})
    await api.get("/runs/run-x", headers=bearer(KEY_A))
    response = await api.get("/runs/run-x", headers=bearer("not-" + KEY_A))
    assert KEY_A not in response.text
    assert KEY_A not in caplog.text
    assert "not-" + KEY_A not in caplog.text


async def test_an_exposed_api_without_keys_refuses_everyone(openflow_home: Path) -> None:
    app = create_app(home=openflow_home, task_queue="q", require_keys=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
        response = await http.get("/workflows")
        assert response.status_code == 401
        assert "no api_keys" in response.json()["error"]["message"]


async def test_serve_binds_beyond_loopback_only_with_keys(openflow_home: Path) -> None:
    with pytest.raises(UnsafeBind, match="add api_keys to .*settings.json or use --host 127.0.0.1"):
        serve("0.0.0.0", 8000, openflow_home)
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert is_loopback("[::1]") and is_loopback("127.8.9.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("example.org")
    assert not is_loopback("192.168.1.4")
