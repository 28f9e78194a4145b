"""Fixtures for the HTTP API: the app over the session's Temporal server, a worker, helpers."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn
from fastapi import FastAPI
from temporalio.client import Client
from temporalio.worker import Worker

from openflow.api import create_app
from openflow.live import FileLiveChannel
from openflow.server import free_port
from openflow.testing import agent_node, write_scripted_settings
from openflow.worker import build_worker

KEY_A = "key-of-tenant-a-0123456789"
KEY_B = "key-of-tenant-b-9876543210"


node = agent_node


def workflow_json(
    nodes: list[dict[str, Any]],
    edges: Sequence[tuple[str, str]] = (),
    wf_id: str = "wf-api",
) -> dict[str, Any]:
    """A workflow as a client sends it."""
    return {
        "id": wf_id,
        "name": "API test workflow",
        "nodes": nodes,
        "edges": [{"id": f"{a}-{b}", "from": a, "to": b} for a, b in edges],
    }


def set_keys(home: Path, keys: dict[str, str]) -> None:
    """Put tenant API keys into settings.json, keeping what else it holds."""
    path = home / "settings.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["api_keys"] = keys
    path.write_text(json.dumps(data))


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def make_app(client: Client, task_queue: str, openflow_home: Path) -> Callable[..., FastAPI]:
    """Build the app against the session server, this test's queue and home."""

    def build(**kw: Any) -> FastAPI:
        kw.setdefault("home", openflow_home)
        kw.setdefault("task_queue", task_queue)
        kw.setdefault("live", FileLiveChannel(openflow_home / "runs"))
        kw.setdefault("poll_interval", 0.05)
        kw.setdefault("keepalive_interval", 0.5)
        return create_app(client, **kw)

    return build


@pytest_asyncio.fixture(loop_scope="session")
async def api(make_app: Callable[..., FastAPI]) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client over the app, in process."""
    transport = httpx.ASGITransport(app=make_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
        yield http


@pytest_asyncio.fixture(loop_scope="session")
async def worker(client: Client, task_queue: str, openflow_home: Path) -> AsyncIterator[Worker]:
    """A worker for this test's queue."""
    w = build_worker(client, task_queue, openflow_home)
    async with w:
        yield w


@pytest.fixture
def script(openflow_home: Path) -> Callable[..., None]:
    """Write the scripted provider's turns for this test."""

    def write(turns: dict[str, list[dict[str, Any]]], exhausted: str | None = "echo") -> None:
        write_scripted_settings(openflow_home, turns, exhausted)

    return write


async def wait_for_state(
    http: httpx.AsyncClient,
    run_id: str,
    predicate: Callable[[dict[str, Any]], bool],
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Poll GET /runs/{id} until `predicate(state)` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: dict[str, Any] = {}
    while loop.time() < deadline:
        response = await http.get(f"/runs/{run_id}", headers=headers)
        if response.status_code == 200:
            last = response.json()
            if predicate(last):
                return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"state not reached; last: {json.dumps(last)[:1500]}")


async def wait_for(
    check: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.05
) -> Any:
    """Poll an async `check` until it returns something truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError("condition not reached in time")


class ServedApp:
    """The app served by uvicorn on a loopback port, in its own thread and event loop."""

    def __init__(self, app: FastAPI) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="api-server", daemon=True)

    def __enter__(self) -> ServedApp:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the API server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def served(openflow_env: dict[str, str], openflow_home: Path) -> Iterator[ServedApp]:
    """The app over a real socket, connecting to Temporal by itself from `OPENFLOW_*`."""
    app = create_app(
        home=openflow_home,
        live=FileLiveChannel(openflow_home / "runs"),
        poll_interval=0.05,
        keepalive_interval=0.5,
    )
    with ServedApp(app) as served_app:
        yield served_app
