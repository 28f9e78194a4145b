"""A run's files over HTTP: handoffs as stored with their manifest, artifacts, tenants kept apart."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.worker import Worker

from openflow.activities.store import FileRunStore
from tests.api.conftest import KEY_A, KEY_B, bearer, node, set_keys, wait_for_state, workflow_json

pytestmark = pytest.mark.asyncio(loop_scope="session")

MARKDOWN = "# Notes\n\n## Summary\nShipped — with ünïcode.\n"
TEMPLATE = "# Notes\n\n## Summary\n<!-- Required: the result -->\n"
FLOW = workflow_json(
    [
        node("plan"),
        node("doc", handoff={"format": "markdown", "template": TEMPLATE}, output_schema=None),
    ],
    edges=[("plan", "doc")],
    wf_id="wf-files",
)


async def test_handoffs_and_artifacts_are_served_as_stored_to_their_tenant_only(
    api: httpx.AsyncClient, openflow_home: Path, worker: Worker, script: object
) -> None:
    script(  # type: ignore[operator]
        {
            "plan": [{"submit": {"summary": "a plan"}}],
            "doc": [{"submit": {"markdown": MARKDOWN}}],
        }
    )
    set_keys(openflow_home, {KEY_A: "tenant-a", KEY_B: "tenant-b"})
    started = await api.post("/runs", json={"workflow": FLOW}, headers=bearer(KEY_A))
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    state = await wait_for_state(
        api, run_id, lambda s: s["status"] == "completed", headers=bearer(KEY_A)
    )

    for node_id, media in (("plan", "application/json"), ("doc", "text/markdown")):
        response = await api.get(f"/runs/{run_id}/handoffs/{node_id}", headers=bearer(KEY_A))
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith(media)
        manifest = state["handoffs"][node_id]
        assert response.headers["x-openflow-sha256"] == manifest["sha256"]
        assert response.headers["x-openflow-sha256"] == hashlib.sha256(response.content).hexdigest()
        assert int(response.headers["x-openflow-size"]) == manifest["sizeBytes"]
        assert int(response.headers["x-openflow-size"]) == len(response.content)
    doc = await api.get(f"/runs/{run_id}/handoffs/doc", headers=bearer(KEY_A))
    assert doc.content.decode() == MARKDOWN
    plan = await api.get(f"/runs/{run_id}/handoffs/plan", headers=bearer(KEY_A))
    assert json.loads(plan.content) == {"summary": "a plan"}

    # A spilled tool output as a worker's store holds it, and a sealed plan.
    spilled, sealed = str(uuid.uuid4()), str(uuid.uuid4())
    store = FileRunStore(openflow_home / "runs")
    big = ("line of output\n" * 4000).encode()
    store.put_bytes(run_id, f"artifacts/{spilled}-bash.txt", big)
    store.put_bytes(run_id, f"artifacts/{sealed}-plan.md", b"# Plan\n")
    artifact = await api.get(f"/runs/{run_id}/artifacts/{spilled}", headers=bearer(KEY_A))
    assert artifact.status_code == 200
    assert artifact.content == big
    assert artifact.headers["content-type"].startswith("text/plain")
    assert artifact.headers["x-openflow-sha256"] == hashlib.sha256(big).hexdigest()
    plan_md = await api.get(f"/runs/{run_id}/artifacts/{sealed}", headers=bearer(KEY_A))
    assert plan_md.headers["content-type"].startswith("text/markdown")

    missing = [
        f"/runs/{run_id}/handoffs/nobody",
        f"/runs/{run_id}/artifacts/{uuid.uuid4()}",
        f"/runs/{run_id}/artifacts/..%2Fhandoffs",
        f"/runs/{run_id}/artifacts/{spilled[:8]}",
    ]
    for path in missing:
        response = await api.get(path, headers=bearer(KEY_A))
        assert response.status_code == 404, (path, response.text)
        assert response.json()["error"]["code"].endswith("not_found")

    for path in (
        f"/runs/{run_id}/handoffs/doc",
        f"/runs/{run_id}/artifacts/{spilled}",
        "/runs/run-nope/handoffs/doc",
    ):
        other = await api.get(path, headers=bearer(KEY_B))
        assert other.status_code == 404, other.text
        assert other.json()["error"]["code"] == "run_not_found"
        assert MARKDOWN not in other.text
        assert (await api.get(path)).status_code == 401
