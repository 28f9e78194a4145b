"""Bad input gets a clear 4xx of the API's error shape; failures never show a stack trace."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from openflow.api import create_app
from openflow.engine.limits import MAX_ENTRYPOINT_BYTES, MAX_MESSAGE_BYTES
from openflow.server import free_port
from tests.api.conftest import ServedApp, node, workflow_json

pytestmark = pytest.mark.asyncio(loop_scope="session")


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The error object of a response, checked for status, shape and the absence of a trace."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert {"code", "message"} <= set(body["error"]) <= {"code", "message", "details"}
    assert "Traceback" not in response.text and 'File "' not in response.text
    error: dict[str, Any] = body["error"]
    return error


async def test_malformed_json_is_a_400(api: httpx.AsyncClient) -> None:
    for raw in (b"{not json", b'{"node_id": "a", "text": NaN}', b"\xff\xfe{}"):
        response = await api.post(
            "/runs/run-x/input", content=raw, headers={"Content-Type": "application/json"}
        )
        error = error_of(response, 400)
        assert error["code"] == "malformed_json"
        assert "JSON" in error["message"]


async def test_json_nested_past_the_limit_is_a_422_naming_it(api: httpx.AsyncClient) -> None:
    for raw in (b"[" * 100_000, b'{"node_id": "a", "text": "t", "x": ' + b"[" * 129 + b"]" * 129):
        response = await api.post(
            "/runs/run-x/input", content=raw, headers={"Content-Type": "application/json"}
        )
        error = error_of(response, 422)
        assert error["code"] == "limit_exceeded"
        assert "over the limit max_json_depth (128 levels)" in error["message"]
        assert error["details"]["limit"] == "max_json_depth"


async def test_wrong_types_are_a_422_naming_the_field(api: httpx.AsyncClient) -> None:
    response = await api.post("/runs/run-x/approvals/ap-1", json={"allow": "perhaps"})
    error = error_of(response, 422)
    assert error["code"] == "invalid_request"
    assert error["message"].startswith("body.allow:")
    assert error["details"][0]["loc"] == ["body", "allow"]

    response = await api.post("/runs/run-x/input", json={"node_id": "a", "text": "t", "x": 1})
    assert error_of(response, 422)["details"][0]["loc"] == ["body", "x"]

    response = await api.post("/runs/run-x/input", json=["node_id", "text"])
    assert error_of(response, 422)["code"] == "invalid_request"


async def test_a_missing_body_is_a_422_that_says_so(api: httpx.AsyncClient) -> None:
    response = await api.post("/runs/run-x/retry")
    assert error_of(response, 422)["message"] == "the request body is missing; send a JSON object"


async def test_start_needs_exactly_one_workflow(api: httpx.AsyncClient) -> None:
    wf = workflow_json([node("a")])
    for body in ({}, {"workflow": wf, "workflow_id": "wf-api"}):
        error = error_of(await api.post("/runs", json=body), 422)
        assert "exactly one of 'workflow_id' and 'workflow'" in error["message"]


async def test_start_rejects_unsafe_run_ids_and_project_dirs(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    wf = workflow_json([node("a")])
    for run_id in ("../escape", "a/b", "", "-flag", "x" * 200):
        response = await api.post("/runs", json={"workflow": wf, "run_id": run_id})
        assert error_of(response, 422)["details"][0]["loc"] == ["body", "run_id"]
    for folder in ("relative/dir", str(tmp_path / "missing")):
        response = await api.post("/runs", json={"workflow": wf, "project_dir": folder})
        assert error_of(response, 422)["code"] == "invalid_project_dir"
    response = await api.post("/runs", json={"workflow": wf, "provider_id": "nowhere"})
    assert "provider 'nowhere' is not in settings.json" in error_of(response, 422)["message"]


async def test_an_invalid_inline_workflow_is_a_422_naming_the_node(
    api: httpx.AsyncClient,
) -> None:
    wf = workflow_json([node("a"), node("a")])
    error = error_of(await api.post("/runs", json={"workflow": wf}), 422)
    assert error["code"] == "invalid_workflow"
    assert error["details"][0]["code"] == "DuplicateNodeId"
    assert error["details"][0]["node_id"] == "a"
    assert "'a'" in error["message"]


async def test_a_body_over_the_limit_is_a_413(make_app: Callable[..., FastAPI]) -> None:
    app = make_app(max_body_bytes=1000)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
        body = {"node_id": "a", "text": "x" * 2000}
        response = await http.post("/runs/run-x/input", json=body)
        assert error_of(response, 413)["code"] == "payload_too_large"

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(20):
                yield b" " * 100

        response = await http.post(
            "/runs/run-x/input", content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert (
            "over the limit max_request_bytes (1,000 bytes)" in error_of(response, 413)["message"]
        )

        response = await http.post("/runs/run-x/input", json={"node_id": "a", "text": "small"})
        assert error_of(response, 404)["code"] == "run_not_found"


async def test_unknown_runs_workflows_and_routes_are_404(api: httpx.AsyncClient) -> None:
    for method, path, body in (
        ("GET", "/runs/run-nope", None),
        ("GET", "/runs/run-nope/events", None),
        ("POST", "/runs/run-nope/input", {"node_id": "a", "text": "t"}),
        ("POST", "/runs/run-nope/approvals/ap-1", {"allow": True}),
        ("POST", "/runs/run-nope/retry", {"node_id": "a"}),
        ("POST", "/runs/run-nope/messages", {"node_id": "a", "text": "t"}),
        ("POST", "/runs/run-nope/stop", None),
        ("POST", "/runs/run-nope/resume", None),
    ):
        response = await api.request(method, path, json=body)
        error = error_of(response, 404)
        assert error["code"] == "run_not_found"
        assert "'run-nope'" in error["message"]
    response = await api.post("/runs", json={"workflow_id": "ghost"})
    assert error_of(response, 404)["code"] == "workflow_not_found"
    assert error_of(await api.get("/workflows/ghost"), 404)["code"] == "workflow_not_found"
    assert error_of(await api.get("/nowhere"), 404)["code"] == "not_found"
    response = await api.delete("/runs")
    assert error_of(response, 405)["code"] == "method_not_allowed"
    assert "GET" in response.headers["allow"]


async def test_bad_query_and_header_values_are_a_422(api: httpx.AsyncClient) -> None:
    response = await api.get("/runs", params={"status": "sleeping"})
    assert error_of(response, 422)["details"][0]["loc"] == ["query", "status"]
    response = await api.get("/runs/run-x/events", params={"after": -1})
    assert error_of(response, 422)["details"][0]["loc"] == ["query", "after"]
    response = await api.get("/runs/run-x/events", headers={"Last-Event-ID": "soon"})
    assert error_of(response, 422)["details"][0]["loc"] == ["header", "Last-Event-ID"]


class _Broken:
    """A Temporal client whose every call fails in a way nobody planned for."""

    namespace = "default"

    def get_workflow_handle(self, run_id: str) -> Any:
        raise RuntimeError("internal detail that must stay on the server")

    def list_workflows(self, query: str, limit: int = 0) -> Any:
        raise RuntimeError("internal detail that must stay on the server")


async def test_an_unexpected_failure_is_a_500_with_a_reference_only(
    openflow_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(_Broken(), home=openflow_home, task_queue="q")  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    caplog.set_level(logging.ERROR, logger="openflow.api")
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
        for path in ("/runs/run-1", "/runs", "/inbox"):
            response = await http.get(path)
            error = error_of(response, 500)
            assert error["code"] == "internal_error"
            assert "internal detail" not in response.text
            reference = error["message"].rsplit("reference ", 1)[1].rstrip(")")
            assert reference in caplog.text
    assert "internal detail that must stay on the server" in caplog.text


async def test_an_unreachable_temporal_is_a_503(
    openflow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENFLOW_TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
    app = create_app(home=openflow_home, task_queue="q")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
        error = error_of(await http.get("/runs"), 503)
        assert error["code"] == "temporal_unavailable"
        assert "OPENFLOW_TEMPORAL_ADDRESS" in error["message"]
        health = await http.get("/health")
        assert health.status_code == 200
        assert health.json()["status"] == "degraded"
        assert (await http.get("/workflows")).status_code == 200


def tiny_node(node_id: str, output_schema: Any = None) -> dict[str, Any]:
    """The smallest node a workflow file can hold."""
    schema = output_schema if output_schema is not None else {"type": "object"}
    return {
        "id": node_id,
        "label": node_id,
        "kind": "agent",
        "position": {"x": 0, "y": 0},
        "agent": {"system_prompt": "", "task_prompt": "", "output_schema": schema},
    }


def nested_schema_text(levels: int) -> str:
    """The JSON of an object schema whose properties nest `levels` objects deep."""
    return '{"type":"object","properties":{"a":' * levels + '{"type":"string"}' + "}}" * levels


def hostile_workflows() -> dict[str, tuple[str, str]]:
    """Workflow JSON texts over a limit, by case, with the limit each must be refused by."""
    deep = json.dumps(workflow_json([tiny_node("a")])).replace(
        '{"type": "object"}', nested_schema_text(10_000), 1
    )
    nested_450 = json.dumps(workflow_json([tiny_node("a")])).replace(
        '{"type": "object"}', nested_schema_text(450), 1
    )
    nested_40 = json.dumps(workflow_json([tiny_node("a")])).replace(
        '{"type": "object"}', nested_schema_text(40), 1
    )
    many = json.dumps(workflow_json([tiny_node(f"n{i}") for i in range(10_000)]))
    wide = json.dumps(workflow_json([tiny_node("a", {"description": "x" * 200_000})]))
    return {
        "10,000-level schema": (deep, "max_json_depth"),
        "450-level schema": (nested_450, "max_json_depth"),
        "40-level schema": (nested_40, "max_schema_depth"),
        "10,000 nodes": (many, "max_nodes"),
        "200 KB schema": (wide, "max_schema_bytes"),
    }


async def test_hostile_workflows_are_refused_by_name_on_every_route(
    api: httpx.AsyncClient,
) -> None:
    json_headers = {"Content-Type": "application/json"}
    for case, (text, limit) in hostile_workflows().items():
        bodies = [
            ("POST", "/runs", '{"workflow": ' + text + "}"),
            ("POST", "/workflows/validate", text),
            ("PUT", "/workflows/wf-api", text),
        ]
        for method, path, body in bodies:
            started = time.monotonic()
            response = await api.request(method, path, content=body, headers=json_headers)
            error = error_of(response, 422)
            assert error["code"] == "limit_exceeded", (case, path, error)
            assert f"over the limit {limit}" in error["message"], (case, path, error)
            assert time.monotonic() - started < 10, (case, path)
    assert error_of(await api.get("/workflows/wf-api"), 404)["code"] == "workflow_not_found"


async def test_long_entrypoints_and_messages_are_refused_by_name(
    api: httpx.AsyncClient,
) -> None:
    wf = workflow_json([node("a")])
    long_entry = "é" * (MAX_ENTRYPOINT_BYTES.value // 2 + 1)
    response = await api.post("/runs", json={"workflow": wf, "entrypoint": long_entry})
    error = error_of(response, 422)
    assert error["code"] == "limit_exceeded"
    assert error["details"] == {
        "limit": "max_entrypoint_bytes",
        "value": MAX_ENTRYPOINT_BYTES.value,
        "found": MAX_ENTRYPOINT_BYTES.value + 2,
    }
    long_text = "x" * (MAX_MESSAGE_BYTES.value + 1)
    for path, body in (
        ("/runs/run-x/input", {"node_id": "a", "text": long_text}),
        ("/runs/run-x/messages", {"node_id": "a", "text": long_text}),
        ("/runs/run-x/retry", {"node_id": "a", "message": long_text}),
        ("/runs/run-x/approvals/ap-1", {"allow": False, "reason": long_text}),
    ):
        error = error_of(await api.post(path, json=body), 422)
        assert error["code"] == "limit_exceeded", path
        assert "over the limit max_message_bytes" in error["message"], path


async def test_a_fifty_megabyte_entrypoint_is_a_413_before_it_is_read(
    served: ServedApp,
) -> None:
    # Announce a 50 MB body and send none of it: the answer must come from the length alone.
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(
        b"POST /runs HTTP/1.1\r\nHost: api.test\r\nContent-Type: application/json\r\n"
        b"Content-Length: 50000000\r\n\r\n" + b'{"workflow_id": "wf", "entrypoint": "xxxx'
    )
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 15)  # the server closes the connection
    head, _, rest = answer.partition(b"\r\n\r\n")
    writer.close()
    assert head.startswith(b"HTTP/1.1 413"), head
    error = json.loads(rest)["error"]
    assert error["code"] == "payload_too_large"
    assert "over the limit max_request_bytes (2,097,152 bytes)" in error["message"]
    assert time.monotonic() - started < 15


MALFORMED: list[tuple[str, str, Any]] = [
    ("POST", "/runs", b"{"),
    ("POST", "/runs", b'{"workflow": Infinity}'),
    ("POST", "/runs", b"\x00\x01\x02"),
    ("POST", "/runs", b'"just a string"'),
    ("POST", "/runs", {"workflow_id": 5}),
    ("POST", "/runs", {"workflow_id": "wf", "entrypoint": ["a", "list"]}),
    ("POST", "/runs", {"workflow_id": "wf", "run_id": {"an": "object"}}),
    ("POST", "/runs", {"workflow": {"id": "x", "name": "x", "nodes": "many", "edges": []}}),
    ("POST", "/runs", {"workflow": {"id": "x", "name": "x", "nodes": [{}], "edges": []}}),
    ("POST", "/runs", {"workflow": [1, 2, 3]}),
    ("POST", "/runs", b"[" * 300 + b"]" * 300),
    ("POST", "/runs", b'{"a":' * 5_000 + b"1" + b"}" * 5_000),
    ("POST", "/workflows/validate", b"null"),
    ("POST", "/workflows/validate", {"id": None, "name": 1, "nodes": None, "edges": None}),
    ("POST", "/workflows/validate", b'{"id": "x", "name": "x", "nodes": [], "edges": [],}'),
    ("PUT", "/workflows/x", {"id": "x", "name": "x", "nodes": [], "edges": [], "settings": 7}),
    ("PUT", "/workflows/" + "x" * 300, {"id": "x", "name": "x", "nodes": [], "edges": []}),
    ("POST", "/runs/run-x/input", {"node_id": None, "text": "t"}),
    ("POST", "/runs/run-x/input", {"node_id": "a", "text": 5}),
    ("POST", "/runs/run-x/input", {"node_id": "", "text": "t"}),
    ("POST", "/runs/run-x/approvals/ap-1", {"allow": "yes please"}),
    ("POST", "/runs/run-x/approvals/ap-1", {"allow": True, "reason": ["r"]}),
    ("POST", "/runs/run-x/retry", {"node_id": {"id": "a"}}),
    ("POST", "/runs/run-x/messages", b"{}"),
    ("GET", "/runs?limit=0", None),
    ("GET", "/runs?limit=abc", None),
    ("GET", "/runs?status=" + "x" * 10_000, None),
    ("GET", "/runs/run-x/events?after=1e400", None),
    ("GET", "/runs/run-x/events?after=99999999999999999999", None),
    ("GET", "/runs/" + "r" * 2_000, None),
]


async def test_malformed_requests_get_a_4xx_json_error_never_a_500(
    api: httpx.AsyncClient,
) -> None:
    for method, path, body in MALFORMED:
        if isinstance(body, bytes):
            kwargs: dict[str, Any] = {
                "content": body,
                "headers": {"Content-Type": "application/json"},
            }
        else:
            kwargs = {"json": body} if body is not None else {}
        response = await api.request(method, path, **kwargs)
        assert 400 <= response.status_code < 500, (method, path[:80], response.text[:300])
        error_of(response, response.status_code)
