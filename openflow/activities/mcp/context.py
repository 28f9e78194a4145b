"""A node's MCP resources and prompts resolved when its run starts (spec 1.4, 2.3 step 9).

Each server some node names is started once; every selection becomes an `McpContextSnapshot`
cut to its `maxBytes`. A server that cannot be set up, a resource or prompt it cannot give,
becomes a snapshot with an `error` and no content: the run goes on without it and the node's
chat says so (`engine.advance.mcp_notices`).
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import mcp_types

from openflow.activities.mcp.catalog import MAX_CONCURRENT_SETUPS
from openflow.activities.mcp.config import McpServers, parse_servers
from openflow.activities.mcp.connection import (
    START_TIMEOUT_S,
    describe_failure,
    log_path,
    open_session,
)
from openflow.activities.mcp.errors import McpConfigError
from openflow.engine.spec import (
    AgentNodeConfig,
    McpContextSnapshot,
    McpPromptSelection,
    McpResourceSelection,
    Workflow,
)

Selection = McpResourceSelection | McpPromptSelection
READ_TIMEOUT_S = 15.0


def _cut(text: str, max_bytes: int) -> tuple[str, int, int, bool]:
    """`text` cut to at most `max_bytes` of UTF-8 on a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, len(data), len(data), False
    kept = data[:max_bytes].decode("utf-8", errors="ignore")
    return kept, len(data), len(kept.encode("utf-8")), True


def _resource_text(result: mcp_types.ReadResourceResult) -> tuple[str, str | None]:
    parts: list[str] = []
    mime: str | None = None
    for item in result.contents:
        mime = mime or item.mime_type
        if isinstance(item, mcp_types.TextResourceContents):
            parts.append(item.text)
        else:
            size = len(base64.b64decode(item.blob, validate=False)) if item.blob else 0
            parts.append(f"[binary content {item.mime_type or 'of unknown type'}, {size} bytes]")
    return "\n".join(parts), mime


def _prompt_text(result: mcp_types.GetPromptResult) -> str:
    lines: list[str] = []
    for message in result.messages:
        content = message.content
        text = getattr(content, "text", None)
        if not isinstance(text, str):
            resource = getattr(content, "resource", None)
            text = getattr(resource, "text", None)
        if not isinstance(text, str):
            text = f"[{getattr(content, 'type', 'content')} content]"
        lines.append(f"{message.role}: {text}")
    return "\n\n".join(lines)


def _snapshot(selection: Selection, **fields: Any) -> McpContextSnapshot:
    if isinstance(selection, McpResourceSelection):
        kind, source = "resource", selection.uri
    else:
        kind, source = "prompt", selection.name
    return McpContextSnapshot(kind=kind, server_id=selection.server_id, source=source, **fields)


async def _resolve_one(session: Any, selection: Selection) -> McpContextSnapshot:
    try:
        async with asyncio.timeout(READ_TIMEOUT_S):
            if isinstance(selection, McpResourceSelection):
                result = await session.read_resource(selection.uri)
                text, mime = _resource_text(result)
                description = None
            else:
                result = await session.get_prompt(selection.name, dict(selection.arguments))
                text, mime = _prompt_text(result), "text/plain"
                description = result.description
    except Exception as exc:  # one selection the server cannot give is left out alone
        return _snapshot(selection, error=describe_failure(exc, "answer in time"))
    content, original, included, truncated = _cut(text, selection.max_bytes)
    return _snapshot(
        selection,
        description=description,
        mime_type=mime,
        content=content,
        original_size_bytes=original,
        included_size_bytes=included,
        truncated=truncated,
    )


def _selections(agent: AgentNodeConfig) -> list[Selection]:
    """A node's resources, then its prompts: the order its snapshots keep."""
    return [*agent.mcp_resources, *agent.mcp_prompts]


async def resolve_context(
    settings_mcp: Any,
    workflow: Workflow,
    *,
    cwd: Path,
    run_dir: Path | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
) -> None:
    """Fill in `mcpContextSnapshots` of every node that selects MCP resources or prompts."""
    wanted: dict[str, list[tuple[int, Selection]]] = {}
    nodes = [n for n in workflow.nodes if n.agent.mcp_resources or n.agent.mcp_prompts]
    for index, node in enumerate(nodes):
        for selection in _selections(node.agent):
            wanted.setdefault(selection.server_id, []).append((index, selection))
    if not wanted:
        return
    try:
        configured = parse_servers(settings_mcp)
    except McpConfigError as exc:
        configured = McpServers(servers={}, problems={sid: str(exc) for sid in wanted})
    gate = asyncio.Semaphore(MAX_CONCURRENT_SETUPS)
    resolved: dict[tuple[int, int], McpContextSnapshot] = {}

    async def server(server_id: str, selections: list[tuple[int, Selection]]) -> None:
        config = configured.servers.get(server_id)
        if config is None:
            problem = configured.problems.get(server_id, "it is not configured (or disabled)")
            failure = (
                f'MCP server {server_id!r} was skipped: {problem} — fix "mcp" in settings.json'
            )
            for index, selection in selections:
                resolved[(index, id(selection))] = _snapshot(selection, error=failure)
            return
        log = log_path(run_dir, server_id) if config.transport == "stdio" else None
        async with gate:
            try:
                async with asyncio.timeout(start_timeout_s) as deadline:
                    async with open_session(config, cwd=cwd, log=log) as session:
                        deadline.reschedule(None)
                        for index, selection in selections:
                            resolved[(index, id(selection))] = await _resolve_one(
                                session, selection
                            )
                return
            except Exception as exc:  # a server that cannot be set up is skipped
                reason = describe_failure(exc, f"start within {start_timeout_s:g}s")
        failure = f"MCP server {server_id!r} was skipped: it could not be set up ({reason})"
        for index, selection in selections:
            if (index, id(selection)) not in resolved:
                resolved[(index, id(selection))] = _snapshot(selection, error=failure)

    await asyncio.gather(*(server(sid, sels) for sid, sels in sorted(wanted.items())))
    for index, node in enumerate(nodes):
        node.agent.mcp_context_snapshots = [
            resolved[(index, id(selection))] for selection in _selections(node.agent)
        ]


__all__ = ["READ_TIMEOUT_S", "resolve_context"]
