"""MCP tools in a tool batch: each call goes to its server, checked against the run's pin.

Before every call the server's current definition of the tool is hashed and compared with the
one pinned at run start; a changed tool is refused. Calls time out after 120 s and are never
retried (spec 4.5, 13): errors come back as results, not as retryable ToolErrors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import mcp_types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from openflow.activities.mcp.catalog import PinnedTool, pinned_tools
from openflow.activities.mcp.config import McpServerConfig, parse_servers
from openflow.activities.mcp.connection import (
    START_TIMEOUT_S,
    McpSessions,
    definition_sha256,
    describe_failure,
    list_all_tools,
)
from openflow.activities.mcp.errors import McpError, McpUnavailable
from openflow.activities.mcp.naming import LEGACY_PREFIX, parse_tool_name, tool_name
from openflow.activities.tools.base import Failed, Tool, ToolContext, ToolError, ToolOutput
from openflow.activities.tools.registry import ToolRegistry
from openflow.engine.request import ToolAccessPolicy, ToolSpec
from openflow.engine.transcript import ToolCall

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 120.0
CATALOG_KEY = "catalog.json"
INTENT_KEY = "_i"


class McpTimeout(ToolError):
    """An MCP call that did not answer in time; not retried, unlike other timeouts."""

    kind = "timeout"

    def __init__(self, name: str, seconds: float) -> None:
        super().__init__(
            f"{name} timed out after {seconds:g}s — the MCP server did not answer; MCP calls "
            "are not retried automatically, so call it again only if repeating it is safe"
        )


def _decoded_size(data: str) -> int:
    """Bytes a base64 text stands for."""
    data = data.strip()
    return len(data) * 3 // 4 - data[-2:].count("=")


def _summary(block: Any) -> str:
    """One content block as text; anything that is not text is described, not inlined."""
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        what = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
        size = _decoded_size(block.data)
        return f"[{what} content: {block.mime_type}, {size} bytes, not shown]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link: {block.uri}" + (f" ({block.name})]" if block.name else "]")
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        kind = resource.mime_type or "binary"
        return f"[resource {resource.uri}: {kind}, {_decoded_size(resource.blob)} bytes]"
    return f"[{getattr(block, 'type', 'unknown')} content, not shown]"


def render_result(result: mcp_types.CallToolResult) -> str:
    """The text the model sees: text content joined, other content summarised."""
    parts = [_summary(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts) if parts else "(the tool returned no content)"


class McpTool(Tool):
    """One pinned MCP tool of a run; calls reach the server through the batch's sessions."""

    def __init__(
        self,
        pinned: PinnedTool,
        sessions: McpSessions,
        *,
        call_timeout_s: float = CALL_TIMEOUT_S,
        list_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.name = pinned.spec.name  # type: ignore[misc]
        self.description = pinned.spec.description  # type: ignore[misc]
        self.parameters = pinned.spec.parameters  # type: ignore[misc]
        self.tier = pinned.spec.tier  # type: ignore[misc]
        self.concurrency = (  # type: ignore[misc]
            "shared" if pinned.spec.concurrency == "shared" else "exclusive"
        )
        self.mutates = pinned.spec.tier == "write"  # type: ignore[misc]
        self.pin = pinned.mcp
        self._sessions = sessions
        self._call_timeout_s = call_timeout_s
        self._list_timeout_s = list_timeout_s

    def validate(self, args: dict[str, Any]) -> None:
        """Leave argument checks to the server, which owns the schema and reports problems."""

    def lock_keys(self, ctx: ToolContext, args: dict[str, Any]) -> list[str]:
        """Exclusive tools of one server run one at a time (spec 4.5)."""
        if self.concurrency == "shared":
            return []
        return [f"mcp-server:{self.pin.server_id}"]

    def _arguments(self, call: ToolCall) -> dict[str, Any]:
        """The call's arguments without the UI intent field, unless the tool declares it."""
        declared = self.parameters.get("properties") or {}
        return {k: v for k, v in call.arguments.items() if k != INTENT_KEY or k in declared}

    async def run(self, ctx: ToolContext, call: ToolCall, args: dict[str, Any]) -> ToolOutput:
        try:
            session = await self._sessions.session(self.pin.server_id)
        except McpUnavailable as exc:
            return ToolOutput(content=Failed(str(exc)).render(), is_error=True)
        try:
            await self._check_pin(session)
            result = await self._call(session, self._arguments(call))
        except ToolError as error:
            return ToolOutput(content=error.render(), is_error=True)
        return ToolOutput(content=render_result(result), is_error=bool(result.is_error))

    async def _check_pin(self, session: ClientSession) -> None:
        """Refuse the call when the server's tool is gone or differs from the pinned one."""
        server = self.pin.server_id
        try:
            async with asyncio.timeout(self._list_timeout_s):
                current = await list_all_tools(session)
        except Exception as exc:  # any failure to list means the server cannot be used now
            reason = describe_failure(exc, f"list its tools within {self._list_timeout_s:g}s")
            raise Failed(
                f"MCP server {server!r} is unreachable: {reason} — check that it runs, then "
                "call the tool again"
            ) from None
        tool = next((t for t in current if t.name == self.pin.tool), None)
        if tool is None:
            raise Failed(
                f"MCP tool {self.name} is no longer offered by server {server!r}; start a new "
                "run to use the server's current tools"
            )
        if definition_sha256(tool) != self.pin.sha256:
            raise Failed(
                f"MCP tool {self.name} changed since this run started (pinned definition "
                f"{self.pin.sha256[:12]}); start a new run to use the new version"
            )

    async def _call(
        self, session: ClientSession, arguments: dict[str, Any]
    ) -> mcp_types.CallToolResult:
        try:
            async with asyncio.timeout(self._call_timeout_s):
                return await session.call_tool(self.pin.tool, arguments)
        except TimeoutError:
            raise McpTimeout(self.name, self._call_timeout_s) from None
        except MCPError as exc:
            raise Failed(f"MCP tool {self.name} failed: {exc.message}") from None
        except RuntimeError as exc:
            raise Failed(f"MCP tool {self.name} returned an unusable result: {exc}") from None
        except Exception as exc:  # the server went away mid-call; the model gets the reason
            reason = describe_failure(exc)
            raise Failed(f"MCP server {self.pin.server_id!r} is unreachable: {reason}") from None


class McpToolRegistry(ToolRegistry):
    """A batch's registry: the worker's tools plus the run's pinned MCP tools."""

    def __init__(self, base: ToolRegistry | None, tools: Iterable[McpTool]) -> None:
        super().__init__(tools)
        self._base = base

    def get(self, name: str) -> Tool | None:
        own = super().get(name)
        if own is not None:
            return own
        found = self._base.get(name) if self._base is not None else None
        if found is None and name.startswith(LEGACY_PREFIX):
            legacy = parse_tool_name(name)
            if legacy is not None:
                return super().get(tool_name(*legacy))
        return found

    def names(self) -> list[str]:
        base = self._base.names() if self._base is not None else []
        return sorted(set(super().names()) | set(base))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def specs(
        self,
        policy: ToolAccessPolicy = "execution",
        *,
        read_only: bool = False,
        plan_source: bool = False,
    ) -> list[ToolSpec]:
        """The worker's own catalog; MCP tools are offered from the run's pinned catalog."""
        if self._base is None:
            return []
        return self._base.specs(policy, read_only=read_only, plan_source=plan_source)


def _catalog(store: Any, run_id: str) -> list[Mapping[str, Any]]:
    try:
        entries = json.loads(store.get_bytes(run_id, CATALOG_KEY))
    except FileNotFoundError:
        return []
    return [e for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []


def _servers(settings_mcp: Any) -> dict[str, McpServerConfig]:
    try:
        return parse_servers(settings_mcp).servers
    except McpError:
        return {}


@contextlib.asynccontextmanager
async def batch_registry(
    base: ToolRegistry | None,
    store: Any,
    run_id: str,
    *,
    home: Path,
    execution_dir: Path,
    run_dir: Path | None = None,
    call_timeout_s: float = CALL_TIMEOUT_S,
    start_timeout_s: float = START_TIMEOUT_S,
) -> AsyncIterator[ToolRegistry | None]:
    """The registry a batch runs with; MCP servers it uses are stopped when it ends."""
    pinned = pinned_tools(_catalog(store, run_id))
    if not pinned:
        yield base
        return
    from openflow.settings import SettingsError, load_settings

    try:
        servers = _servers(load_settings(home).mcp)
    except SettingsError as exc:
        log.warning("MCP tools are unavailable in this batch: %s", exc)
        servers = {}
    sessions = McpSessions(
        servers, cwd=execution_dir, run_dir=run_dir, start_timeout_s=start_timeout_s
    )
    tools = [
        McpTool(p, sessions, call_timeout_s=call_timeout_s, list_timeout_s=start_timeout_s)
        for p in pinned.values()
    ]
    try:
        yield McpToolRegistry(base, tools)
    finally:
        await sessions.aclose()


__all__ = [
    "CALL_TIMEOUT_S",
    "McpTimeout",
    "McpTool",
    "McpToolRegistry",
    "McpUnavailable",
    "batch_registry",
    "render_result",
]
