"""Attachments and the mutation gate over the API: multipart bodies, refusals that record nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.worker import Worker

from openflow.engine.limits import MAX_ATTACHMENT_BYTES
from tests.api.conftest import node, wait_for_state, workflow_json

pytestmark = pytest.mark.asyncio(loop_scope="session")

# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c49444154789c63f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)
ASK = workflow_json([node("ask", requestUserInput=True)])


def form(**fields: Any) -> dict[str, str]:
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}


async def test_a_multipart_start_attaches_files_and_a_multipart_answer_too(
    api: httpx.AsyncClient, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "Which one?"}, {"echo": True}]})
    started = await api.post(
        "/runs",
        data=form(workflow=ASK, entrypoint="look at this"),
        files=[("attachments", ("chart.png", PNG, "image/png"))],
    )
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    await wait_for_state(api, run_id, lambda s: s["awaitingNodeIds"] == ["ask"])
    events = (await api.get(f"/runs/{run_id}/events")).json()
    [ref] = next(e for e in events if e["type"] == "RunStarted")["attachments"]
    assert (ref["name"], ref["media_type"], ref["size_bytes"]) == (
        "chart.png",
        "image/png",
        len(PNG),
    )

    answered = await api.post(
        f"/runs/{run_id}/input",
        data={"node_id": "ask", "text": "this one"},
        files=[("attachments", ("notes.txt", b"the second one\n", "text/plain"))],
    )
    assert answered.status_code == 200, answered.text
    state = await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    [said] = [m for m in state["chatLogs"]["ask"] if m["content"] == "this one"]
    assert [(a["name"], a["media_type"]) for a in said["attachments"]] == [
        ("notes.txt", "text/plain")
    ]


async def test_a_file_too_big_or_of_no_supported_type_is_refused_and_nothing_recorded(
    api: httpx.AsyncClient, worker: Worker, script: Any
) -> None:
    script({"ask": [{"ask": "Which one?"}, {"echo": True}]})
    big = b"x" * (MAX_ATTACHMENT_BYTES.value + 1)
    too_big = await api.post(
        "/runs",
        data=form(workflow=ASK, run_id="run-too-big"),
        files=[("attachments", ("big.txt", big, "text/plain"))],
    )
    assert too_big.status_code == 422
    error = too_big.json()["error"]
    assert error["code"] == "limit_exceeded" and "max_attachment_bytes" in error["message"]
    binary = await api.post(
        "/runs",
        data=form(workflow=ASK, run_id="run-binary"),
        files=[("attachments", ("blob.bin", b"\x00\x01\xfe\xff" * 10, "application/octet-stream"))],
    )
    assert binary.status_code == 422
    assert binary.json()["error"]["code"] == "invalid_attachment"
    assert "'blob.bin' is not a PNG" in binary.json()["error"]["message"]
    listed = (await api.get("/runs")).json()
    assert not {"run-too-big", "run-binary"} & {r["run_id"] for r in listed}

    # An answer with a file it cannot take leaves the run as it was: still waiting.
    started = await api.post("/runs", json={"workflow": ASK, "entrypoint": "go"})
    run_id = started.json()["run_id"]
    await wait_for_state(api, run_id, lambda s: s["awaitingNodeIds"] == ["ask"])
    before = (await api.get(f"/runs/{run_id}/events")).json()
    refused = await api.post(
        f"/runs/{run_id}/input",
        data={"node_id": "ask", "text": "here"},
        files=[("attachments", ("big.txt", big, "text/plain"))],
    )
    assert refused.status_code == 422
    assert (await api.get(f"/runs/{run_id}/events")).json() == before
    # JSON bodies work as they always did.
    plain = await api.post(f"/runs/{run_id}/input", json={"node_id": "ask", "text": "plain"})
    assert plain.status_code == 200, plain.text


async def test_a_multipart_message_to_a_live_node_reaches_its_next_request(
    api: httpx.AsyncClient, worker: Worker, script: Any, openflow_home: Path
) -> None:
    script(
        {
            "talk": [
                {"delay_ms": 3000, "submit": {"summary": "without the message"}},
                {"submit": {"summary": "with the message"}},
            ]
        }
    )
    talk = workflow_json([node("talk", requestUserInput=True)])
    started = await api.post("/runs", json={"workflow": talk, "entrypoint": "go"})
    run_id = started.json()["run_id"]
    await wait_for_state(api, run_id, lambda s: s["statusByNode"]["talk"] == "started")
    big = b"x" * (MAX_ATTACHMENT_BYTES.value + 1)
    before = (await api.get(f"/runs/{run_id}/events")).json()
    refused = await api.post(
        f"/runs/{run_id}/messages",
        data={"node_id": "talk", "text": "too big"},
        files=[("attachments", ("big.txt", big, "text/plain"))],
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "limit_exceeded"
    assert (await api.get(f"/runs/{run_id}/events")).json() == before

    sent = await api.post(
        f"/runs/{run_id}/messages",
        data={"node_id": "talk", "text": "and this chart"},
        files=[("attachments", ("chart.png", PNG, "image/png"))],
    )
    assert sent.status_code == 200, sent.text
    state = await wait_for_state(api, run_id, lambda s: s["status"] == "completed")
    assert state["outputs"]["talk"] == {"summary": "with the message"}
    [said] = [m for m in state["chatLogs"]["talk"] if m["content"] == "and this chart"]
    assert [a["name"] for a in said["attachments"]] == ["chart.png"]
    path = openflow_home / "runs" / run_id / "transcripts" / "talk.jsonl"
    items = [json.loads(line) for line in path.read_text().splitlines()]
    [item] = [i for i in items if i.get("content") == "and this chart"]
    [ref] = item["attachments"]
    assert (ref["name"], ref["media_type"], ref["size_bytes"]) == (
        "chart.png",
        "image/png",
        len(PNG),
    )
    assert (openflow_home / "runs" / run_id / "attachments" / ref["sha256"]).read_bytes() == PNG


async def test_the_mutation_gate_refuses_a_second_run_on_a_folder_unless_allowed(
    api: httpx.AsyncClient, worker: Worker, script: Any, tmp_path: Path
) -> None:
    script({"ask": [{"ask": "Wait here"}, {"echo": True}]})
    project = tmp_path / "project"
    project.mkdir()
    first = await api.post(
        "/runs", json={"workflow": ASK, "project_dir": str(project), "run_id": "run-changing"}
    )
    assert first.status_code == 201, first.text
    await wait_for_state(api, "run-changing", lambda s: s["awaitingNodeIds"] == ["ask"])

    second = await api.post("/runs", json={"workflow": ASK, "project_dir": str(project)})
    assert second.status_code == 409
    message = second.json()["error"]["message"]
    assert "run 'run-changing' is changing the project folder" in message
    assert "allowConcurrent" in message
    # A run that only reads, or one elsewhere, is not held back; nor one that says so.
    reader = workflow_json(
        [node("ask", requestUserInput=True, tools={"approvalMode": "read_only"})]
    )
    read_only = await api.post("/runs", json={"workflow": reader, "project_dir": str(project)})
    assert read_only.status_code == 201, read_only.text
    allowed = await api.post(
        "/runs", json={"workflow": ASK, "project_dir": str(project), "allowConcurrent": True}
    )
    assert allowed.status_code == 201, allowed.text
