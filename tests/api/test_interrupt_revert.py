"""Interrupt, resume with a message and revert over the API: what a caller gets back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.worker import Worker

from tests.api.conftest import node, wait_for_state, workflow_json

pytestmark = pytest.mark.asyncio(loop_scope="session")

EDIT = workflow_json([node("edit", requestUserInput=True, tools={"approvalMode": "yolo"})])


async def test_interrupt_resume_and_revert_answer_with_the_reason(
    api: httpx.AsyncClient, worker: Worker, script: Any, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("before\n")
    write = {"name": "write", "args": {"path": "a.txt", "content": "after\n"}, "id": "call-a"}
    script({"edit": [{"tools": [write]}, {"ask": "More?"}, {"echo": True}]})
    response = await api.post(
        "/runs", json={"workflow": EDIT, "entrypoint": "go", "project_dir": str(tmp_path)}
    )
    run_id = response.json()["run_id"]
    state = await wait_for_state(api, run_id, lambda s: s["awaitingNodeIds"] == ["edit"])
    (batch,) = state["editBatches"]

    for path, body, code, reason in [
        (f"/runs/{run_id}/interrupt", {"node_id": "edit"}, 409, "waits for input"),
        (f"/runs/{run_id}/interrupt", {"node_id": "nope"}, 409, "unknown node 'nope'"),
        (f"/runs/{run_id}/interrupt", {}, 422, "node_id"),
        (f"/runs/{run_id}/batches/nope/revert", None, 404, "no edit batch 'nope'"),
        (f"/runs/{run_id}/resume", {"node_id": "edit", "message": "x"}, 409, "still live"),
    ]:
        answer = await api.post(path, json=body)
        assert answer.status_code == code, (path, answer.text)
        assert reason in answer.text, (path, answer.text)

    reverted = await api.post(f"/runs/{run_id}/batches/{batch['batch_id']}/revert")
    assert reverted.status_code == 200, reverted.text
    assert reverted.json() == {"batch_id": batch["batch_id"], "paths": ["a.txt"]}
    assert (tmp_path / "a.txt").read_text() == "before\n"
    again = await api.post(f"/runs/{run_id}/batches/{batch['batch_id']}/revert")
    assert again.status_code == 404, again.text

    await api.post(f"/runs/{run_id}/stop")
    await wait_for_state(api, run_id, lambda s: s["status"] == "stopped")
    bad = await api.post(f"/runs/{run_id}/resume", json={"node_id": "nope", "message": "hi"})
    assert bad.status_code == 409 and "unknown node 'nope'" in bad.text
    resumed = await api.post(f"/runs/{run_id}/resume", json={"node_id": "edit", "message": "Ada"})
    assert resumed.status_code == 202, resumed.text
    state = await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    users = [m["content"] for m in state["chatLogs"]["edit"] if m["role"] == "user"]
    assert users[-1] == "Ada"
