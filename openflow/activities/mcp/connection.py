"""Connections to MCP servers over stdio or streamable HTTP, and a batch's open sessions.

An MCP session lives in anyio task groups that must be entered and left by the same task, so
`McpSessions` gives every server its own owner task; calls from other tasks share the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import TextIO

import httpx2
import mcp_types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from openflow.activities.mcp.config import McpServerConfig
from openflow.activities.mcp.errors import McpUnavailable
from openflow.activities.tools.process import supervised

START_TIMEOUT_S = 15.0
MAX_TOOL_PAGES = 100
_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
_LOG_PREFIX = "mcp-logs"
log = logging.getLogger(__name__)


def definition_sha256(tool: mcp_types.Tool) -> str:
    """sha256 of a tool's canonical JSON definition: name, description and input schema."""
    definition = {
        "name": tool.name,
        "description": tool.description or "",
        "inputSchema": tool.input_schema,
    }
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def log_path(run_dir: Path | None, server_id: str) -> Path | None:
    """Where a stdio server's error output goes in the run folder (None: discarded)."""
    if run_dir is None:
        return None
    from openflow.activities.mcp.naming import encode_segment

    return run_dir / _LOG_PREFIX / f"{encode_segment(server_id)}.log"


@contextlib.contextmanager
def _errlog(path: Path | None) -> Iterator[TextIO]:
    if path is None:
        with open(os.devnull, "w", encoding="utf-8") as sink:
            yield sink
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        yield log


def _executable(command: str, folder: Path, env: Mapping[str, str]) -> str:
    """The server's program as the launcher will run it; FileNotFoundError when there is none
    (found here, so the reason reaches the warning instead of the launcher's exit code)."""
    if "/" in command:
        path = folder / command
        if not path.is_file():
            raise FileNotFoundError(errno.ENOENT, "no such file", command)
        if not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, "not executable", command)
        return str(path)
    search = env.get("PATH") or get_default_environment().get("PATH") or os.defpath
    found = shutil.which(command, path=search)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "not found on PATH", command)
    return found


@contextlib.asynccontextmanager
async def open_session(
    config: McpServerConfig, *, cwd: Path, log: Path | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized session; a stdio server's error output goes to `log`, and it stops on exit."""
    async with contextlib.AsyncExitStack() as stack:
        if config.transport == "stdio":
            folder = config.working_dir(cwd)
            if not folder.is_dir():
                raise McpUnavailable(f"its working folder {str(folder)!r} does not exist")
            # Through the tool launcher: the server dies with this worker, even on kill -9.
            command = _executable(str(config.command), folder, config.env)
            launcher, *argv = supervised([command, *config.args])
            params = StdioServerParameters(
                command=launcher,
                args=argv,
                env=dict(config.env) or None,
                cwd=folder,
            )
            errlog = stack.enter_context(_errlog(log))
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        else:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=dict(config.headers), timeout=_HTTP_TIMEOUT)
            )
            read, write = await stack.enter_async_context(
                streamable_http_client(str(config.url), http_client=http)
            )
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        yield session


async def list_all_tools(session: ClientSession) -> list[mcp_types.Tool]:
    """Every tool the server lists, following pagination."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe_failure(exc: BaseException, timeout: str = "") -> str:
    """Why a server could not be used (`timeout` ends "it did not ..."), quoting no secret."""
    exc = _leaf(exc)
    if isinstance(exc, TimeoutError):
        return f"it did not {timeout or 'answer in time'}"
    if isinstance(exc, McpUnavailable):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return "its command was not found"
    if isinstance(exc, PermissionError):
        return "its command is not executable"
    if isinstance(exc, OSError):
        return f"it could not be started ({exc.strerror or type(exc).__name__})"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"it answered HTTP {exc.response.status_code}"
    if isinstance(exc, httpx2.TransportError):
        return f"it could not be reached ({type(exc).__name__})"
    if isinstance(exc, MCPError):
        return f"it failed: {exc.message}"
    return f"it failed ({type(exc).__name__})"


class McpSessions:
    """The sessions a tool batch opens, one per server, each started on first use."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        cwd: Path,
        run_dir: Path | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self._servers = dict(servers)
        self._cwd = cwd
        self._run_dir = run_dir
        self._start_timeout_s = start_timeout_s
        self._sessions: dict[str, asyncio.Future[ClientSession]] = {}
        self._owners: dict[str, asyncio.Task[None]] = {}
        self._closing = asyncio.Event()

    def configured(self, server_id: str) -> bool:
        """Whether settings.json still configures `server_id`."""
        return server_id in self._servers

    async def session(self, server_id: str) -> ClientSession:
        """The open session with `server_id`; raises McpUnavailable when it cannot be had."""
        future = self._sessions.get(server_id)
        if future is None:
            config = self._servers.get(server_id)
            if config is None:
                raise McpUnavailable(
                    f"MCP server {server_id!r} is no longer configured in settings.json; "
                    "add it back or start a new run"
                )
            future = asyncio.get_running_loop().create_future()
            self._sessions[server_id] = future
            self._owners[server_id] = asyncio.create_task(self._own(server_id, config, future))
        return await asyncio.shield(future)

    async def _own(
        self, server_id: str, config: McpServerConfig, ready: asyncio.Future[ClientSession]
    ) -> None:
        """Open the session, hand it out, and hold it open until the batch closes."""
        try:
            async with asyncio.timeout(self._start_timeout_s) as deadline:
                errors_to = log_path(self._run_dir, server_id)
                async with open_session(config, cwd=self._cwd, log=errors_to) as session:
                    deadline.reschedule(None)
                    ready.set_result(session)
                    await self._closing.wait()
        except (Exception, asyncio.CancelledError) as exc:
            if not ready.done():
                reason = describe_failure(exc, f"start within {self._start_timeout_s:g}s")
                ready.set_exception(
                    McpUnavailable(
                        f"MCP server {server_id!r} is unreachable: {reason} — check that it "
                        "runs, then call the tool again"
                    )
                )
            else:
                log.info("MCP server %r closed its session: %s", server_id, describe_failure(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def aclose(self) -> None:
        """Close every session and stop the servers this batch started."""
        self._closing.set()
        for server_id, owner in self._owners.items():
            if not self._sessions[server_id].done():
                owner.cancel()
        if self._owners:
            await asyncio.gather(*self._owners.values(), return_exceptions=True)


__all__ = [
    "MAX_TOOL_PAGES",
    "START_TIMEOUT_S",
    "McpSessions",
    "definition_sha256",
    "describe_failure",
    "list_all_tools",
    "log_path",
    "open_session",
]
