"""The workflow catalog over HTTP and validation that names the node or edge at fault."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from openflow.catalog import Catalog
from tests.api.conftest import node, workflow_json

pytestmark = pytest.mark.asyncio(loop_scope="session")

BROKEN = Path(__file__).resolve().parents[1] / "fixtures" / "broken"


async def test_catalog_create_read_replace_delete(
    api: httpx.AsyncClient, openflow_home: Path
) -> None:
    assert (await api.get("/workflows")).json() == []
    wf = workflow_json([node("a"), node("b")], [("a", "b")])

    created = await api.put("/workflows/wf-api", json=wf)
    assert created.status_code == 201, created.text
    assert created.json()["edges"] == [{"id": "a-b", "from": "a", "to": "b"}]
    assert Catalog(openflow_home).get("wf-api").node_ids == ["a", "b"]

    wf["name"] = "Renamed"
    replaced = await api.put("/workflows/wf-api", json=wf)
    assert replaced.status_code == 200
    fetched = await api.get("/workflows/wf-api")
    assert fetched.json()["name"] == "Renamed"
    assert fetched.json()["nodes"][0]["agent"]["task_prompt"] == "Do a."
    assert [w["id"] for w in (await api.get("/workflows")).json()] == ["wf-api"]

    assert (await api.delete("/workflows/wf-api")).status_code == 204
    assert (await api.get("/workflows/wf-api")).status_code == 404
    assert (await api.delete("/workflows/wf-api")).status_code == 404


async def test_unknown_keys_survive_a_round_trip(api: httpx.AsyncClient) -> None:
    wf = workflow_json([node("a", customFlag=True)])
    wf["editorState"] = {"zoom": 2}
    await api.put("/workflows/wf-api", json=wf)
    fetched = (await api.get("/workflows/wf-api")).json()
    assert fetched["editorState"] == {"zoom": 2}
    assert fetched["nodes"][0]["agent"]["customFlag"] is True


async def test_put_refuses_a_mismatched_id_and_an_invalid_workflow(
    api: httpx.AsyncClient,
) -> None:
    response = await api.put("/workflows/other", json=workflow_json([node("a")]))
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "id_mismatch"

    looped = workflow_json([node("a"), node("b")], [("a", "b"), ("b", "a")])
    response = await api.put("/workflows/wf-api", json=looped)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["code"] == "Cycle"
    assert (await api.get("/workflows/wf-api")).status_code == 404


async def test_validate_accepts_a_valid_workflow(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/workflows/validate", json=workflow_json([node("a"), node("b")], [("a", "b")])
    )
    assert response.status_code == 200
    assert response.json() == {"ok": True}


@pytest.mark.parametrize(
    "fixture", sorted(p.name for p in BROKEN.glob("*.json") if p.stem not in ("not_json",))
)
async def test_validate_names_what_is_wrong(api: httpx.AsyncClient, fixture: str) -> None:
    data = json.loads((BROKEN / fixture).read_text())
    response = await api.post("/workflows/validate", json=data)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    if fixture == "not_a_workflow.json":
        assert error["code"] == "invalid_request"
        return
    over_a_limit = fixture == "schema_over_limit.json"
    assert error["code"] == ("limit_exceeded" if over_a_limit else "invalid_workflow")
    problems = error["details"]
    assert problems and all(p["message"] for p in problems)
    first = problems[0]
    assert first["message"] in error["message"]
    if first["code"] not in ("EmptyWorkflow", "Cycle", "PlanModeSourceMissing"):
        assert first["node_id"] or first["edge_id"], first


async def test_validate_lists_every_problem(api: httpx.AsyncClient) -> None:
    wf = workflow_json([node("a"), node("a"), node("b")], [("b", "b"), ("b", "ghost")])
    response = await api.post("/workflows/validate", json=wf)
    problems = response.json()["error"]["details"]
    assert [p["code"] for p in problems][:3] == ["DuplicateNodeId", "SelfEdge", "MissingEndpoint"]
    assert problems[1]["edge_id"] == "b-b"
    assert "and 2 more" in response.json()["error"]["message"]
