"""Discovery at run start: list every configured server's tools and pin their definitions.

The pinned entries join the built-in tools in the run's `catalog.json`, so the tools a run
offers (names, descriptions, schemas) are fixed when it starts. A server that cannot be set up,
and a tool whose name is taken, is left out with a warning that starts with `ignored `.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types
from pydantic import BaseModel, ConfigDict

from openflow.activities.mcp.config import McpServerConfig, parse_servers
from openflow.activities.mcp.connection import (
    START_TIMEOUT_S,
    definition_sha256,
    describe_failure,
    list_all_tools,
    log_path,
    open_session,
)
from openflow.activities.mcp.errors import McpConfigError
from openflow.activities.mcp.naming import tool_name
from openflow.engine.limits import schema_limit_problem
from openflow.engine.request import ToolSpec

MAX_CONCURRENT_SETUPS = 4
MAX_NAME_LENGTH = 64
_FIX = 'fix its entry under "mcp" in settings.json'


class McpPin(BaseModel):
    """Which server tool a catalog entry stands for, and the hash of its definition then."""

    model_config = ConfigDict(frozen=True)

    server_id: str
    tool: str
    sha256: str


class PinnedTool(BaseModel):
    """One MCP tool as the run offers it: its ToolSpec and its pin."""

    model_config = ConfigDict(frozen=True)

    spec: ToolSpec
    mcp: McpPin

    def catalog_entry(self) -> dict[str, Any]:
        """The `catalog.json` entry: the ToolSpec's fields plus `mcp`."""
        return {**self.spec.model_dump(mode="json"), "mcp": self.mcp.model_dump(mode="json")}


@dataclass
class McpDiscovery:
    """What discovery found: the tools to offer, in name order, and what it left out."""

    tools: list[PinnedTool] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def pinned_tools(catalog: Iterable[Mapping[str, Any]]) -> dict[str, PinnedTool]:
    """The MCP entries of a run's `catalog.json`, by name."""
    pinned: dict[str, PinnedTool] = {}
    for entry in catalog:
        pin = entry.get("mcp")
        if not isinstance(pin, Mapping):
            continue
        spec = ToolSpec.model_validate({k: v for k, v in entry.items() if k != "mcp"})
        pinned[spec.name] = PinnedTool(spec=spec, mcp=McpPin.model_validate(pin))
    return pinned


def _spec(server_id: str, config: McpServerConfig, tool: mcp_types.Tool, name: str) -> ToolSpec:
    parameters = dict(tool.input_schema) if tool.input_schema else {}
    parameters.setdefault("type", "object")
    return ToolSpec(
        name=name,
        description=tool.description or f"MCP tool {tool.name!r} of server {server_id!r}.",
        parameters=parameters,
        tier=config.tier,
        concurrency=config.concurrency,
    )


async def _list_server(
    config: McpServerConfig, *, cwd: Path, log: Path | None, timeout_s: float
) -> list[mcp_types.Tool]:
    async with asyncio.timeout(timeout_s):
        async with open_session(config, cwd=cwd, log=log) as session:
            return await list_all_tools(session)


async def discover_tools(
    settings_mcp: Any,
    *,
    reserved: Iterable[str],
    cwd: Path,
    run_dir: Path | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
    max_concurrent: int = MAX_CONCURRENT_SETUPS,
) -> McpDiscovery:
    """Connect to every configured server (a few at once), list and pin their tools."""
    try:
        configured = parse_servers(settings_mcp)
    except McpConfigError as exc:
        return McpDiscovery(warnings=[f"ignored every MCP server: {exc}"])
    warnings = [
        f"ignored MCP server {sid!r}: {problem} — {_FIX}"
        for sid, problem in configured.problems.items()
    ]
    gate = asyncio.Semaphore(max_concurrent)

    async def setup(server_id: str, config: McpServerConfig) -> list[mcp_types.Tool] | str:
        log = log_path(run_dir, server_id) if config.transport == "stdio" else None
        async with gate:
            try:
                return await _list_server(config, cwd=cwd, log=log, timeout_s=start_timeout_s)
            except Exception as exc:  # any failure of one server only leaves that server out
                reason = describe_failure(
                    exc, f"start and list its tools within {start_timeout_s:g}s"
                )
        if log is not None and log.is_file() and log.stat().st_size:
            reason += f" (its error output is in {log})"
        return reason

    servers = configured.servers
    listed = await asyncio.gather(*(setup(sid, cfg) for sid, cfg in servers.items()))
    taken = set(reserved)
    found: list[PinnedTool] = []
    for (server_id, config), tools in zip(servers.items(), listed, strict=True):
        if isinstance(tools, str):
            warnings.append(f"ignored MCP server {server_id!r}: {tools} — {_FIX}")
            continue
        for tool in sorted(tools, key=lambda t: t.name):
            if not tool.name:
                warnings.append(f"ignored a tool of MCP server {server_id!r}: it has no name")
                continue
            name = tool_name(server_id, tool.name)
            if name in taken:
                warnings.append(
                    f"ignored MCP tool {tool.name!r} of server {server_id!r}: "
                    f"the name {name!r} is already taken by another tool"
                )
                continue
            if len(name) > MAX_NAME_LENGTH:
                warnings.append(
                    f"ignored MCP tool {tool.name!r} of server {server_id!r}: its name {name!r} "
                    f"is longer than the {MAX_NAME_LENGTH} characters providers accept; "
                    "give the server a shorter id"
                )
                continue
            over = schema_limit_problem(tool.input_schema, "its input schema")
            if over is not None:
                warnings.append(
                    f"ignored MCP tool {tool.name!r} of server {server_id!r}: {over[1]}"
                )
                continue
            taken.add(name)
            pin = McpPin(server_id=server_id, tool=tool.name, sha256=definition_sha256(tool))
            found.append(PinnedTool(spec=_spec(server_id, config, tool, name), mcp=pin))
    found.sort(key=lambda t: t.spec.name)
    return McpDiscovery(tools=found, warnings=warnings)


__all__ = [
    "MAX_CONCURRENT_SETUPS",
    "MAX_NAME_LENGTH",
    "McpDiscovery",
    "McpPin",
    "PinnedTool",
    "discover_tools",
    "pinned_tools",
]
