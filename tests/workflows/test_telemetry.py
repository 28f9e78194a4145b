"""Traces and metrics of a real run on the dev server: one trace, nothing repeated by a replay."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from openflow import telemetry
from openflow.contracts import Action
from openflow.server import EmbeddedServer
from openflow.worker import build_worker
from tests.workflows.conftest import Harness, make_workflow, node

pytestmark = pytest.mark.asyncio(loop_scope="session")

KEY = "sk-PLANTED-KEY-7f3a9c"
PROMPT = "PLANTED-PROMPT-TEXT"
ANSWER = "PLANTED-ANSWER-TEXT"
CONTENT = "PLANTED-FILE-CONTENT"

_EXPORTER = InMemorySpanExporter()
_PROCESSOR = SimpleSpanProcessor(_EXPORTER)


def _spans() -> list[Any]:
    return list(_EXPORTER.get_finished_spans())


def _plant_key(home: Path) -> None:
    settings = home / "settings.json"
    data = json.loads(settings.read_text())
    data["providers"]["scripted"]["api_key"] = KEY
    settings.write_text(json.dumps(data))


async def test_one_trace_survives_a_worker_restart_and_a_replay(
    temporal_server: EmbeddedServer, task_queue: str, openflow_home: Path
) -> None:
    telemetry.install(_PROCESSOR)
    client = await temporal_server.connect()
    harness = Harness(client, task_queue, openflow_home)
    harness.script(
        {
            "write": [
                {"tools": [{"name": "write", "args": {"path": "x.txt", "content": CONTENT}}]},
                {"submit": {"summary": "written"}},
            ],
            "ask": [{"ask": "what name?"}, {"echo": True}],
        }
    )
    _plant_key(openflow_home)
    wf = make_workflow([node("write"), node("ask", requestUserInput=True)], [("write", "ask")])
    caller = trace.get_tracer("test").start_span("caller")
    with trace.use_span(caller, end_on_exit=True):
        async with build_worker(client, task_queue, openflow_home):
            run_id = await harness.start(wf, entrypoint=PROMPT)
            await harness.wait_for(run_id, lambda s: s.status == "paused")
    # A fresh worker replays the run from its history, then finishes it.
    before = {s.context.span_id for s in _spans()}
    async with build_worker(client, task_queue, openflow_home):
        state = await harness.state(run_id)
        (approval,) = state.pending_approvals
        await harness.runs.act(
            run_id,
            Action(kind="approval", approval_id=approval.approval_id, allow=True, by="Ada"),
        )
        await harness.wait_for(run_id, lambda s: "ask" in s.awaiting_node_ids)
        await harness.runs.act(run_id, Action(kind="input", node_id="ask", text=ANSWER))
        assert (await harness.result(run_id)).status == "completed"
        events = await harness.events(run_id)
        state = await harness.state(run_id)
    await harness.replay(run_id)
    # The running cost: the state's usage is the sum of the per-call usage events.
    reports = [e for e in events if e.type == "UsageReported"]
    assert len(reports) == 5
    usage = state.usage
    assert usage.run.input_tokens == sum(e.usage.prompt_tokens for e in reports) > 0
    assert usage.run.output_tokens == sum(e.usage.completion_tokens for e in reports)
    assert sorted(usage.by_node) == ["__post_run_review", "ask", "write"]
    assert usage.run.input_tokens == sum(u.input_tokens for u in usage.by_node.values())

    spans = [s for s in _spans() if s.context.trace_id == caller.context.trace_id]
    ids = [s.context.span_id for s in spans]
    twice = sorted({s.name for s in spans if ids.count(s.context.span_id) > 1})
    assert not twice, f"exported twice: {twice}"
    assert before <= set(ids)
    names = [s.name for s in spans]
    for name in (
        "openflow.node write",
        "openflow.node ask",
        "openflow.pause approval write",
        "openflow.pause input ask",
    ):
        assert names.count(name) == 1, (name, names)
    pause = next(s for s in spans if s.name == "openflow.pause approval write")
    decisions = [dict(e.attributes) for e in pause.events if e.name == "openflow.tool.decision"]
    assert [(d["openflow.decision"], d["openflow.decided_by"]) for d in decisions] == [
        ("allow", "Ada")
    ]
    assert names.count("execute_tool write") == 1
    assert names.count("openflow.run wf-test") == 1
    by_id = {s.context.span_id: s for s in spans}

    def ancestors(span: Any) -> list[str]:
        out = []
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            out.append(span.name)
        return out

    chats = [s for s in spans if s.name == "chat test-model"]
    # write: the call and the submit; ask: the question and the echo; then the run's review
    assert sorted(c.attributes["openflow.node_id"] for c in chats) == [
        "__post_run_review",
        "ask",
        "ask",
        "write",
        "write",
    ]
    for chat in chats:
        a = chat.attributes
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "scripted"
        assert a["gen_ai.request.model"] == "test-model"
        assert a["gen_ai.response.model"] == "test-model"
        assert a["gen_ai.usage.input_tokens"] > 0
        assert "gen_ai.usage.output_tokens" in a
        assert "gen_ai.usage.cache_read.input_tokens" in a
        assert "gen_ai.response.finish_reasons" in a
        assert "openflow.run wf-test" in ancestors(chat)
        if chat.attributes["openflow.node_id"] != "__post_run_review":
            assert f"openflow.node {chat.attributes['openflow.node_id']}" in ancestors(chat)
    tool = next(s for s in spans if s.name == "execute_tool write")
    assert tool.attributes["gen_ai.tool.name"] == "write"
    assert tool.attributes["openflow.tool.outcome"] == "ok"
    assert tool.attributes["openflow.tool.tier"] == "write"
    assert "openflow.node write" in ancestors(tool)
    pause = next(s for s in spans if s.name == "openflow.pause input ask")
    assert pause.attributes["openflow.pause.wait_ms"] >= 0
    assert ancestors(pause)[0] == "openflow.run wf-test"
    text = json.dumps([{"name": s.name, "attributes": dict(s.attributes)} for s in spans])
    for planted in (KEY, PROMPT, ANSWER, CONTENT):
        assert planted not in text
    # Spec 9.1's timings, from what the activities measured.
    timed = [(e.phase, e.label) for e in events if e.type == "PhaseTimed"]
    assert timed.count(("tool", "write")) == 1
    assert sum(1 for phase, _ in timed if phase == "ai_invoke") == 5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    totals: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


async def test_metrics_port_serves_counters_that_move(
    temporal_server: EmbeddedServer, task_queue: str, openflow_home: Path
) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "OPENFLOW_HOME": str(openflow_home),
        "OPENFLOW_TEMPORAL_ADDRESS": temporal_server.address,
        "OPENFLOW_NAMESPACE": temporal_server.namespace,
        "OPENFLOW_TASK_QUEUE": task_queue,
        # Traces go to an endpoint nothing listens on: logged once, and runs go on.
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{_free_port()}/v1/traces",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    client = await temporal_server.connect(plugins=[])
    harness = Harness(client, task_queue, openflow_home)
    harness.script({"ask": [{"ask": "name?"}, {"echo": True}]})
    worker = subprocess.Popen(
        [sys.executable, "-m", "openflow.cli", "worker", "--metrics-port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    assert worker.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(worker.stdout or ()), daemon=True)
    reader.start()
    try:
        await _poll(port, lambda m: bool(m) or worker.poll() is not None, timeout=60)
        assert worker.poll() is None, "".join(lines)
        wf = make_workflow([node("first"), node("ask", requestUserInput=True)], [("first", "ask")])
        run_id = await harness.start(wf, entrypoint="go")
        await harness.wait_for(run_id, lambda s: s.status == "paused", timeout=60)
        first = await _poll(port, lambda m: m.get("openflow_model_turns_total", 0) >= 2)
        assert first["openflow_tokens_total"] > 0
        await harness.runs.act(run_id, Action(kind="input", node_id="ask", text="Ada"))
        assert (await harness.result(run_id)).status == "completed"
        later = await _poll(
            port,
            lambda m: m.get("openflow_model_turns_total", 0) > first["openflow_model_turns_total"],
        )
        assert later["openflow_tokens_total"] > first["openflow_tokens_total"]
        assert later.get("openflow_pause_wait_ms_count", 0) >= 1
        assert any(name.startswith("temporal_") for name in later)
        # The unreachable endpoint is said once, however many batches fail.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while "traces could not be exported" not in "".join(lines) and loop.time() < deadline:
            await asyncio.sleep(0.2)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        reader.join(timeout=5)
    output = "".join(lines)
    assert output.count("traces could not be exported") == 1, output
    assert "Traceback" not in output, output


async def _poll(port: int, predicate: Any, timeout: float = 30.0) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: dict[str, float] = {}
    while loop.time() < deadline:
        try:
            last = await asyncio.to_thread(_scrape, port)
        except OSError:
            last = {}
        if predicate(last):
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"metrics did not move: {last}")


async def test_a_run_started_through_the_api_joins_the_callers_trace(
    temporal_server: EmbeddedServer, task_queue: str, openflow_home: Path
) -> None:
    import httpx

    from openflow.api import create_app

    telemetry.install(_PROCESSOR)
    client = await temporal_server.connect()
    harness = Harness(client, task_queue, openflow_home)
    harness.script({})
    app = create_app(client, home=openflow_home, task_queue=task_queue)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    body = {
        "workflow": {
            "id": "wf-api-trace",
            "name": "traced",
            "nodes": [node("only")],
            "edges": [],
        },
        "entrypoint": "go",
    }
    transport = httpx.ASGITransport(app=app)
    async with (
        build_worker(client, task_queue, openflow_home),
        httpx.AsyncClient(transport=transport, base_url="http://api.test") as http,
    ):
        response = await http.post(
            "/runs", json=body, headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
        )
        assert response.status_code == 201, response.text
        run_id = response.json()["run_id"]
        assert (await harness.result(run_id)).status == "completed"
    run = next(
        s
        for s in _spans()
        if s.name == "openflow.run wf-api-trace" and s.attributes["openflow.run_id"] == run_id
    )
    assert f"{run.context.trace_id:032x}" == trace_id
    assert f"{run.parent.span_id:016x}" == "00f067aa0ba902b7"


async def test_continue_as_new_neither_repeats_nor_loses_spans(
    temporal_server: EmbeddedServer,
    task_queue: str,
    openflow_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from openflow.workflows import run as run_module

    monkeypatch.setattr(run_module, "HISTORY_EVENTS_LIMIT", 40)
    telemetry.install(_PROCESSOR)
    client = await temporal_server.connect()
    harness = Harness(client, task_queue, openflow_home)
    turns = [{"tools": [{"name": "ls", "args": {"path": "."}}]} for _ in range(8)]
    harness.script({"busy": [*turns, {"submit": {"summary": "done"}}]})
    wf = make_workflow([node("busy")], []).model_copy(update={"id": "wf-continued"})
    caller = trace.get_tracer("test").start_span("caller")
    with trace.use_span(caller, end_on_exit=True):
        async with build_worker(client, task_queue, openflow_home):
            run_id = await harness.start(wf)
            first = (await harness.handle(run_id).describe()).run_id
            assert (await harness.result(run_id)).status == "completed"
            assert (await harness.handle(run_id).describe()).run_id != first
            state = await harness.state(run_id)
    spans = [s for s in _spans() if s.context.trace_id == caller.context.trace_id]
    ids = [s.context.span_id for s in spans]
    assert len(ids) == len(set(ids))
    names = [s.name for s in spans]
    executions = names.count("openflow.run wf-continued")
    assert executions >= 2
    tools = [s for s in spans if s.name == "execute_tool ls"]
    # Every call has its span (a read the model turn ran may run once more after continuing).
    assert len({s.attributes["gen_ai.tool.call.id"] for s in tools}) == 8
    busy = [s for s in spans if s.name == "openflow.node busy"]
    # The node's span ends where its execution continued as new, and opens again in the next.
    assert 2 <= len(busy) <= executions
    assert sum(1 for s in busy if s.attributes.get("openflow.continued")) == len(busy) - 1
    assert [s.attributes["openflow.node.outcome"] for s in busy].count("completed") == 1
    chats = [s for s in spans if s.name == "chat test-model"]
    assert sum(1 for s in chats if s.attributes["openflow.node_id"] == "busy") == 9
    # The usage carried across executions counts every call once.
    assert state.usage.by_node["busy"].input_tokens == sum(
        s.attributes["gen_ai.usage.input_tokens"]
        for s in chats
        if s.attributes["openflow.node_id"] == "busy"
    )
