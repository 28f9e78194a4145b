"""Fixtures for the MCP tests: a streamable HTTP MCP server on 127.0.0.1 and a work folder."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import uvicorn
from mcp_support import HttpMcp, http_app_server

from openflow.server import free_port


@pytest_asyncio.fixture(loop_scope="session")
async def http_mcp() -> AsyncIterator[HttpMcp]:
    """A fresh HTTP MCP server on a free port, stopped after the test."""
    server = http_app_server()
    port = free_port()
    config = uvicorn.Config(
        server.streamable_http_app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
    )
    runner = uvicorn.Server(config)
    task = asyncio.create_task(runner.serve())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not runner.started:
        if task.done() or loop.time() > deadline:
            raise RuntimeError("the HTTP MCP test server did not start")
        await asyncio.sleep(0.02)
    try:
        yield HttpMcp(server=server, url=f"http://127.0.0.1:{port}/mcp", uvicorn=runner)
    finally:
        runner.should_exit = True
        await task


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path
